"""The Python API (cagtool.capture / cagtool.load), in this process on real torch: the block is
recorded as a normal run that the CLI reads, twice in one process, and torch is as it was after."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch._dynamo import compiled_autograd as ca
from torch._dynamo.utils import counters

import cagtool
from cagtool.record.schema import CacheMissEvent, CAGraphEvent

ROOT = Path(__file__).resolve().parent.parent


def _torch_state() -> tuple:
    cls = ca.AutogradCompilerInstance
    return (
        cls.begin_capture, cls.end_capture, cls.log_compile_reasons, torch.autograd._engine_run_backward,
        ca.reset, ca._enable, ca.compiled_autograd_enabled,
        # cagtool's handlers only: torch adds its own LazyTraceHandler on first compile
        tuple(h for h in logging.getLogger("torch.__trace").handlers if type(h).__module__.startswith("cagtool")),
        logging.getLogger("torch.__trace").level,
        torch._dynamo.config.optimize_ddp,
        torch._dynamo.eval_frame.OptimizeContext.__init__,  # the step tracker's exit hook on compiled calls
        torch._dynamo.output_graph.OutputGraph.call_cleanup_hooks,  # where it sees a compiled optimizer step
        torch._dynamo.eval_frame.DisableContext.__call__,  # its hooks shown inside disabled functions
        torch.nn.Module.train,  # where it sees an evaluation begin (.eval())
        torch.utils.data.DataLoader._get_iterator,  # where it counts the loaders' iterators
        torch.nn.Module.compile, torch.compile,  # where it sees a compile call that compiles nothing
        # where it sees a module hook registered after its compiled forward compiled
        torch.nn.Module.register_forward_hook, torch.nn.Module.register_forward_pre_hook,
        torch.nn.Module.register_full_backward_hook, torch.nn.Module.register_full_backward_pre_hook,
    )


def _stacked(scale: float, rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(rows) * scale


def _train(model: torch.nn.Module, rows: list[int]) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in rows:
        opt.zero_grad()
        model(torch.randn(n, 8)).sum().backward()
        opt.step()


def test_capture_twice_records_runs_and_restores_torch(tmp_path, capsys):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    before = _torch_state()
    for i in range(2):
        with cagtool.capture(backend="eager", output=tmp_path / f"run{i}", reset=True) as cap:
            assert ca.compiled_autograd_enabled is True
            _train(model, [4, 4, 6])
            assert len(list(torch.utils.data.DataLoader(torch.randn(4, 8), batch_size=2))) == 2
            assert len(list(torch.utils.data.DataLoader(torch.randn(4, 8), batch_size=2, collate_fn=functools.partial(_stacked, 1.0)))) == 2
        assert _torch_state() == before  # CA off again, patches and handlers removed
        captures = counters["compiled_autograd"]["captures"]
        _train(model, [4])
        assert counters["compiled_autograd"]["captures"] == captures  # later backwards: no CA
        record = cagtool.load(cap.path).mode("ca")
        graphs = record.of(CAGraphEvent)
        # zero_grad(set_to_none) every step: .grad is None at each backward, so only the shape change recompiles
        assert len(graphs) == 2 == record.manifest.torch_counters["compiled_autograd"]["captures"]
        assert [m.miss_kind for m in record.of(CacheMissEvent)] == ["new_node", "changed_shapes"]
        assert len(cap.steps_frame()) == 3
        assert list(cap.events_frame("ca_cache_miss")["compile_id"]) == ["!0", "!1"]
        # The block's DataLoader iterators are counted; explain does not read the count of a block,
        # which may iterate a loader whose iterator was made before it began.
        assert record.manifest.options["dataloader_iterators"] == 2
        # ... and what each batches with: torch's default, then this file's function (inside a partial).
        default, own = record.manifest.options["collate_functions"]
        assert (default["name"], default["module"], default["kind"], default["user"]) == (
            "default_collate", "torch.utils.data._utils.collate", "function", False), default
        assert own == {"name": "_stacked", "module": __name__, "file": __file__, "line": _stacked.__code__.co_firstlineno,
                       "kind": "function", "user": True, "settings": {}, "wrapped_by": None}, own
        from cagtool.report.recompiles.table import recompile_table

        assert recompile_table(record).data_loaders is None
    text = cap.summary()
    assert "CA graphs: 2" in text and repr(text) == str(text)  # returned (a notebook shows it), not printed
    assert capsys.readouterr().out == ""
    assert cap.summary("json")["ca_graphs"] == 2
    proc = subprocess.run([sys.executable, "-m", "cagtool", "summary", str(cap.path), "--format", "json"], capture_output=True, text=True, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ca_graphs"] == 2


def test_the_recorder_keeps_no_loss_alive_while_an_optimizer_is_and_the_final_state_stands(tmp_path):
    """A step's loss (and so its autograd graph) lives as long as the script keeps it, as under
    python: the recorder holds the last one only weakly while an optimizer is alive (its parameters
    are the final state's). With none (hand-written SGD in a function that has returned), the last
    loss is held: the final state is read from its graph's leaves."""
    import weakref

    from cagtool.record.schema import FinalStateEvent

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    with cagtool.capture(backend="eager", output=tmp_path / "opt", reset=True) as cap:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
        last = weakref.ref(loss)
        del loss
        assert last() is None  # the script let it go: nothing of cagtool's holds it
    final = cagtool.load(cap.path).mode("ca").of(FinalStateEvent)
    assert [f.num_params for f in final] == [4]

    def sgd_by_hand() -> None:
        for _ in range(3):
            loss = model(torch.randn(4, 8)).sum()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None

    with cagtool.capture(backend="eager", output=tmp_path / "by-hand", reset=True) as cap:
        sgd_by_hand()
    final = cagtool.load(cap.path).mode("ca").of(FinalStateEvent)
    assert [f.num_params for f in final] == [4] and final[0].param_norm > 0


@pytest.mark.slow
def test_a_compiled_optimizer_made_before_the_block_with_accumulation_counts_the_scripts_steps(tmp_path):
    """An optimizer made before the block, its step() compiled (no hook runs there), three backwards
    a step: the block's steps are the script's four, seen where the optimizer's state changed, each with
    its three backward calls (not twelve steps of one backward each)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=torch.tensor(0.01), momentum=0.9)
    opt_step = torch.compile(opt.step, backend="eager")
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        for _ in range(4):
            for _ in range(3):
                model(torch.randn(2, 4)).pow(2).mean().backward()
            opt_step()
            opt.zero_grad()
    steps = cap.steps_frame().reset_index()
    assert list(zip(steps["step"], steps["backward_calls"], steps["boundary"])) == [(i, 3, "compiled_optimizer") for i in range(4)]


@pytest.mark.slow
@pytest.mark.parametrize("compiled", ["both", "one"])
def test_a_gan_whose_optimizer_steps_are_compiled_counts_one_step_an_iteration(tmp_path, compiled):
    """A GAN's two optimizers (made in the block), both steps compiled or one of them: each
    iteration (D's backward and step, then G's) is one step of two backward calls, as the script
    and eager mode count it."""
    torch.manual_seed(0)
    G, D = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        oG, oD = torch.optim.SGD(G.parameters(), lr=0.01), torch.optim.SGD(D.parameters(), lr=0.01)
        stepG = torch.compile(oG.step, backend="eager")
        stepD = torch.compile(oD.step, backend="eager") if compiled == "both" else oD.step
        for _ in range(4):
            fake = G(torch.randn(8, 4))
            oD.zero_grad()
            (D(torch.randn(8, 8)).mean() - D(fake.detach()).mean()).backward()
            stepD()
            oG.zero_grad()
            (-D(fake).mean()).backward()
            stepG()
    steps = cap.steps_frame().reset_index()
    assert list(zip(steps["step"], steps["backward_calls"])) == [(i, 2) for i in range(4)]


def test_an_exception_in_the_block_is_recorded_raised_and_torch_restored(tmp_path):
    model = torch.nn.Linear(4, 2)
    before = _torch_state()
    with pytest.raises(ValueError, match="boom"):
        with cagtool.capture(backend="eager", output=tmp_path / "run") as cap:
            model(torch.randn(3, 4)).sum().backward()
            raise ValueError("boom")
    assert _torch_state() == before
    manifest = cagtool.load(cap.path).mode("ca").manifest
    assert manifest.status == "failed" and manifest.exception.type == "ValueError"


def test_import_cagtool_stays_cheap():
    code = "import sys, cagtool; assert callable(cagtool.capture) and callable(cagtool.load); print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
