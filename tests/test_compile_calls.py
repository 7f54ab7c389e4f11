"""Compile calls that compile nothing. `module.compile()`: torch 2.13's Dynamo skips
`Module._call_impl` and a forward of torch's own (nn.Sequential), so `model.compile()` on such a
module runs it eagerly with nothing said (pytorch/pytorch#150915). `torch.compile(model)` as a
statement of its own: the compiled module it returns is dropped. cagtool says so, on the user's
line, with the call that does compile it, and says nothing where the module did compile (a
forward of the script's own, torch.compile(model) kept). On real torch: in this process through
the Python API, and as a user runs `cagtool run`."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from typing import Any

import pytest
import torch
import torch.nn as nn
from conftest import ROOT, cagtool_cmd, cli_in_process
from torch._dynamo.utils import counters

import cagtool
from cagtool.record.loader import load_run
from cagtool.report.figures.metrics import mode_metrics
from cagtool.capture.observe.torch_logs import WRAPPER_FILE
from cagtool.record.schema import (
    FINDING_COMPILED_MODULE_DROPPED,
    FINDING_COMPILED_MODULE_UNUSED,
    FINDING_DYNAMO_DISABLED,
    FINDING_MODULE_COMPILE_SKIPPED,
    DynamoCompileEvent,
    FindingEvent,
)

SCRIPT = ROOT / "tests" / "scripts" / "module_compile_builtin.py"
# torch 2.14 compiles a Sequential under Module.compile() (pytorch/pytorch#150915): there the
# call compiles a frame of its own and nothing may be said (the compat check runs these tests).
SEQUENTIAL_COMPILES = torch.__version__ >= "2.14"


# The script's own module (its forward in the script's file), without running the script.
Head = runpy.run_path(str(SCRIPT))["Head"]


def _steps(*modules: nn.Module, n: int = 2) -> None:
    params = [p for m in modules for p in m.parameters()]
    opt = torch.optim.SGD(params, lr=0.01)
    for _ in range(n):
        x = torch.randn(4, 16)
        for m in modules:
            x = m(x)
        x.sum().backward()
        opt.step()
        opt.zero_grad()


def _findings(path, code: str = FINDING_MODULE_COMPILE_SKIPPED) -> list[FindingEvent]:
    return [f for f in cagtool.load(path).mode("ca").of(FindingEvent) if f.code == code]


def test_a_sequentials_compile_that_compiles_nothing_is_found_on_the_users_line(tmp_path):
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        frames, captures = counters["frames"]["total"], counters["compiled_autograd"]["captures"]
        model.compile(backend="eager"); line = sys._getframe().f_lineno  # noqa: E702 - the line the finding names
        _steps(model)
        # torch's own counts: every frame Dynamo compiled is a compiled-autograd graph, none the model's
        assert counters["frames"]["total"] - frames == counters["compiled_autograd"]["captures"] - captures + SEQUENTIAL_COMPILES == 1 + SEQUENTIAL_COMPILES
    if SEQUENTIAL_COMPILES:
        assert not _findings(cap.path)
        return
    (finding,) = _findings(cap.path)
    assert finding.source is not None and finding.source.file == __file__ and finding.source.line == line
    assert finding.detail["module"] == "torch.nn.modules.container.Sequential"
    assert finding.detail["variable"] == "model" and finding.detail["arguments"] == "backend='eager'"
    assert finding.message.startswith("model.compile() compiled nothing: ")
    assert "model = torch.compile(model, backend='eager')" in finding.message


def test_a_library_that_calls_module_compile_on_the_scripts_model_is_named_and_not_compiled_in_its_place(tmp_path):
    """A library's line makes the call (DeepSpeed's engine.compile() calls module.compile() on the
    script's model): the fix is a model whose forward is the script's own, not the library's object
    compiled. The library is a function whose code is a file under site-packages."""
    import os
    import sysconfig

    namespace: dict = {}
    library = os.path.join(sysconfig.get_paths()["purelib"], "fakelib", "engine.py")
    exec(compile("def compile_for_me(model):\n    model.compile(backend='eager')\n", library, "exec"), namespace)  # noqa: S102
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        namespace["compile_for_me"](model); line = sys._getframe().f_lineno  # noqa: E702 - the line the finding names
        frames = counters["frames"]["total"]
        _steps(model)
        assert counters["frames"]["total"] - frames == 1 + SEQUENTIAL_COMPILES  # the CA graph, and the model where torch compiles it
    if SEQUENTIAL_COMPILES:
        assert not _findings(cap.path)
        return
    (finding,) = _findings(cap.path)
    assert finding.source.file == __file__ and finding.source.line == line and finding.detail["via"] == "fakelib/engine.py:2"
    assert finding.detail["variable"] is None
    assert finding.message.startswith("Sequential.compile(), called by fakelib/engine.py:2, compiled nothing: ")
    assert "Give the library a model whose forward is your own" in finding.message and "torch.compile(" not in finding.message


def test_the_fix_compiles_the_module_through_dynamos_wrapper_and_is_not_found(tmp_path):
    """torch.compile(model) compiles a frame of Dynamo's wrapper file (what the finding's rule
    counts); a module of the script's own compiles its forward under module.compile()."""
    torch._dynamo.reset()
    head = Head()
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        frames, captures = counters["frames"]["total"], counters["compiled_autograd"]["captures"]
        fixed = torch.compile(nn.Sequential(nn.Linear(16, 8), nn.ReLU()), backend="eager")
        head.compile(backend="eager")
        _steps(fixed, head)
        assert counters["frames"]["total"] - frames == counters["compiled_autograd"]["captures"] - captures + 2
    assert _findings(cap.path) == []
    compiled = [e.co_filename for e in cagtool.load(cap.path).mode("ca").of(DynamoCompileEvent) if not e.is_ca_graph]
    assert sum(f.endswith(WRAPPER_FILE) for f in compiled) == 1  # the Sequential, through wrap_inline
    assert sum(f == str(SCRIPT) for f in compiled) == 1  # Head.forward


def test_a_torch_compile_whose_result_is_dropped_is_found_and_one_kept_is_not(tmp_path):
    torch._dynamo.reset()
    model, kept = nn.Sequential(nn.Linear(16, 8), nn.ReLU()), nn.Sequential(nn.Linear(8, 8))
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        frames, captures = counters["frames"]["total"], counters["compiled_autograd"]["captures"]
        torch.compile(model, backend="eager"); line = sys._getframe().f_lineno  # noqa: E702 - the line the finding names
        compiled = torch.compile(kept, backend="eager")
        torch.compile(nn.Linear(16, 16), backend="eager")(torch.randn(2, 16))  # called on its line: compiled, then dropped
        _steps(model, compiled)
        # torch's own counts: the kept one and the one called compiled (a frame each), the dropped one nothing
        assert counters["frames"]["total"] - frames == counters["compiled_autograd"]["captures"] - captures + 2
    (finding,) = _findings(cap.path, FINDING_COMPILED_MODULE_DROPPED)
    assert finding.source is not None and finding.source.file == __file__ and finding.source.line == line
    assert finding.detail["variable"] == "model" and finding.detail["module"] == "torch.nn.modules.container.Sequential"
    assert finding.message.startswith('torch.compile(model, backend="eager") compiled nothing: ')
    assert finding.message.endswith('Keep it: model = torch.compile(model, backend="eager")')
    assert torch.compile.__module__ == "torch" and torch.nn.Module.compile.__qualname__ == "Module.compile"  # torch's own again


def test_a_compiled_module_the_job_never_calls_is_found_on_its_line(tmp_path):
    """`compiled = torch.compile(head)`, and the loop calls `head`: torch compiles no forward."""
    torch._dynamo.reset()
    body, head = nn.Sequential(nn.Linear(16, 8)), Head()
    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        frames, captures = counters["frames"]["total"], counters["compiled_autograd"]["captures"]
        compiled = torch.compile(head, backend="eager"); line = sys._getframe().f_lineno  # noqa: E702 - the line the finding names
        _steps(body, head)
        # torch's own counts: every frame Dynamo compiled is a compiled-autograd graph, none the head's
        assert counters["frames"]["total"] - frames == counters["compiled_autograd"]["captures"] - captures == 1
    (finding,) = _findings(cap.path, FINDING_COMPILED_MODULE_UNUSED)
    assert finding.source is not None and finding.source.file == __file__ and finding.source.line == line
    assert finding.detail == {"module": f"{Head.__module__}.Head", "variable": "head", "kept_as": "compiled",
                              "statement": 'torch.compile(head, backend="eager")'}
    assert finding.message.startswith('compiled = torch.compile(head, backend="eager") compiled nothing: the job never called compiled ')
    assert finding.message.endswith('keep it under the module\'s name: head = torch.compile(head, backend="eager")')
    assert compiled is not None
    # As the headline and `recompiles` say it, with the call that compiles.
    from cagtool.report.findings import skipped_compiles

    (said,) = skipped_compiles(cagtool.load(cap.path).mode("ca"))
    assert said.words == (f"torch.compile(head) (test_compile_calls.py:{line}) compiled nothing: the job never called the compiled "
                          "module it returned (compiled), only head, so head ran eagerly")
    assert said.fix == 'head = torch.compile(head, backend="eager")'


def test_a_compiled_module_called_or_whose_forward_another_compiled_frame_may_run_is_not_found(tmp_path):
    """Called: its forward compiles. Not called, while another compiled function calls the module
    (Lightning compiles a compiled LightningModule's training_step, which calls its forward): that
    frame may have inlined the forward, so nothing is said."""
    torch._dynamo.reset()
    head = Head()
    with cagtool.capture(backend="eager", output=tmp_path / "called", reset=True) as called:
        compiled = torch.compile(head, backend="eager")
        _steps(nn.Sequential(nn.Linear(16, 8)), compiled)
    assert not _findings(called.path, FINDING_COMPILED_MODULE_UNUSED)
    torch._dynamo.reset()
    head = Head()

    @torch.compile(backend="eager")
    def forward(x: torch.Tensor) -> torch.Tensor:
        return head(x)

    with cagtool.capture(backend="eager", output=tmp_path / "inlined", reset=True) as inlined:
        spare = torch.compile(head, backend="eager")
        body = nn.Sequential(nn.Linear(16, 8))
        opt = torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.01)
        for _ in range(2):
            forward(body(torch.randn(4, 16))).sum().backward()
            opt.step()
            opt.zero_grad()
        assert spare is not None
    compiled_code = {e.co_name for e in cagtool.load(inlined.path).mode("ca").of(DynamoCompileEvent) if not e.is_ca_graph}
    assert compiled_code == {"forward"}  # the function's frame, with Head.forward inlined in it: no frame of Head's own
    assert not _findings(inlined.path, FINDING_COMPILED_MODULE_UNUSED)


def _run(tmp_path, *args: str, modes: str = "aot") -> subprocess.CompletedProcess:
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", modes, "--backend", "eager", "-o", str(out), str(SCRIPT),
                           "--steps", "3", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def test_cagtool_run_says_it_in_the_headline_the_recompiles_and_the_summary(tmp_path):
    """The modes that compile find it; the eager mode, where Dynamo is off, says nothing of it (a
    module with forward hooks, as DeepSpeed's engine registers, is compiled under Module.compile()
    all the same: only a mode that compiles can tell), and is not named in the headline."""
    proc = _run(tmp_path, modes="eager,aot")
    line = next(i for i, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "model.compile(backend" in text)
    where = f"module_compile_builtin.py:{line}"
    text = " ".join(proc.stderr.split())  # the job has stdout; cagtool speaks on stderr
    if SEQUENTIAL_COMPILES:
        assert "compiled nothing" not in text and "compile it:" not in text
        return
    assert (f"(2/2): running {SCRIPT} model.compile() ({where}) compiled nothing: Dynamo skips Sequential's call under "
            "Module.compile(), so model ran eagerly in aot;") in text  # the headline, after the modes' progress lines
    assert "what to do: compile it: model = torch.compile(model, backend='eager') (why: cagtool summary " in text
    assert "head.compile()" not in text  # the script's own module compiled
    code, out, err = cli_in_process("recompiles", str(tmp_path / "run"), "--mode", "aot", env={"COLUMNS": "200"})
    assert code == 0, err
    # the loss and the head compiled, so this mode compiled something: no "compiled nothing" line
    assert "compiled nothing" not in out
    code, out, err = cli_in_process("summary", str(tmp_path / "run"), env={"COLUMNS": "300"})
    assert code == 0, err
    assert f"finding: model.compile() compiled nothing" in " ".join(out.split()) and f"({where})" in out


def test_cagtool_run_of_the_fixed_script_says_nothing_of_it(tmp_path):
    proc = _run(tmp_path, "--fixed")
    assert "compiled nothing" not in proc.stderr and "compile it:" not in proc.stderr
    code, out, err = cli_in_process("summary", str(tmp_path / "run"), env={"COLUMNS": "300"})
    assert code == 0 and "finding:" not in out, err


@pytest.mark.parametrize("switch", ["TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE"])
def test_dynamo_switched_off_in_the_jobs_environment_is_said_as_what_compiled_nothing(tmp_path, switch):
    """A user's TORCHDYNAMO_DISABLE=1 (or TORCH_COMPILE_DISABLE=1) turns Dynamo off in every mode:
    the aot and ca modes compile nothing, and the headline said "it compiles nothing itself" of a
    script that calls torch.compile. Now the setting is named, with what to do, and no other cause
    of a compiled-nothing (a compiled module never called) is made up from it."""
    script = ROOT / "sample_scripts" / "mlp_steps.py"
    env = {**os.environ, "CI": "true", switch: "1"}
    proc = subprocess.run(cagtool_cmd("run", "--modes", "aot,ca", "--backend", "eager", "-o", str(tmp_path / "run"), str(script),
                                      "--steps", "4"), cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "torch.compile(model" in text)
    text = " ".join(proc.stderr.split())
    assert (f"torch.compile (mlp_steps.py:{line}) compiled nothing: Dynamo was off ({switch}=1, in the job's environment), so "
            "the compiled code ran eagerly in aot and ca;") in text, text
    assert f"what to do: compile it: unset {switch} (the plain job with it set compiles nothing either)" in text, text
    run = cagtool.load(tmp_path / "run")
    for mode in ("aot", "ca"):
        found = [f for f in run.mode(mode).of(FindingEvent) if f.code.startswith(("dynamo", "compiled_module", "module_compile"))]
        assert [(f.code, f.detail["by"]) for f in found] == [(FINDING_DYNAMO_DISABLED, f"{switch}=1")], found
        assert mode_metrics(run.mode(mode)).forward_graphs == 0


def test_every_torch_compile_call_is_kept_with_its_line_dynamic_and_the_code_it_compiles(tmp_path):
    """The manifest's `compile_calls`: torch.compile(module) names the module's forward,
    module.compile() (torch.compile of its bound _call_impl inside torch) the module's forward too,
    torch.compile(function) the function; `dynamic` as passed; `in_place` for module.compile() (no
    wrapper, no `_orig_mod`). A compiled-autograd graph compiled as
    it is captured (a graph module's generated code) is no call of the job's."""
    torch._dynamo.reset()
    head, body = Head(), nn.Sequential(nn.Linear(16, 8))

    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def halve(x: torch.Tensor) -> torch.Tensor:
        return x / 2

    def my_compiler(gm: Any, example_inputs: Any) -> Any:
        return gm.forward

    with cagtool.capture(backend="eager", output=tmp_path / "run", reset=True) as cap:
        compiled = torch.compile(head, backend="eager"); first = sys._getframe().f_lineno  # noqa: E702
        body.compile(backend="eager", dynamic=True); second = sys._getframe().f_lineno  # noqa: E702
        twice = torch.compile(double, backend=my_compiler, dynamic=False); third = sys._getframe().f_lineno  # noqa: E702
        torch.compile(halve); fourth = sys._getframe().f_lineno  # noqa: E702 - never called: nothing compiled
        _steps(body, compiled)
        twice(torch.randn(3))
    calls = cagtool.load(cap.path).mode("ca").manifest.options["compile_calls"]
    code = lambda f: [f.__code__.co_filename, f.__code__.co_firstlineno]  # noqa: E731
    assert calls == [
        {"file": __file__, "line": first, "via": "", "dynamic": None, "code": code(Head.forward), "in_place": False, "backend": "eager"},
        {"file": __file__, "line": second, "via": "", "dynamic": True, "code": code(nn.Sequential.forward), "in_place": True,
         "backend": "eager"},
        {"file": __file__, "line": third, "via": "", "dynamic": False, "code": code(double), "in_place": False, "backend": "my_compiler"},
        {"file": __file__, "line": fourth, "via": "", "dynamic": None, "code": code(halve), "in_place": False, "backend": "inductor"},
    ]
    # The CA graph was captured and compiled in the block: still four calls.
    assert counters["compiled_autograd"]["captures"] >= 1


def test_a_hooked_sequentials_compile_compiles_its_forward_and_no_mode_says_it_compiled_nothing(tmp_path):
    """tests/scripts/module_compile_hooked.py: a Sequential with a forward pre-hook (DeepSpeed's
    engine registers hooks on the model it then `.compile()`s), compiled with Module.compile():
    Dynamo compiles its forward (torch's unique_graphs 1). The eager mode, where Dynamo is off, said
    "compiled nothing ... ran eagerly in eager", first in the headline and its "what to do"."""
    out = tmp_path / "run"
    script = ROOT / "tests" / "scripts" / "module_compile_hooked.py"
    proc = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "eager,aot", "--backend", "eager", "-o", str(out), str(script)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    aot = [line for line in proc.stdout.splitlines() if line.startswith("counters frames")][-1]
    assert "'unique_graphs': 1" in aot, aot  # torch compiled the Sequential's forward
    assert "compiled nothing" not in proc.stderr and "compile it:" not in proc.stderr, proc.stderr[-3000:]
    assert not [f for mode in ("eager", "aot") for f in cagtool.load(out).mode(mode).of(FindingEvent)
                if f.code == FINDING_MODULE_COMPILE_SKIPPED]


@pytest.mark.slow  # two 2-rank jobs
def test_torch_compile_of_a_ddp_module_that_compiles_nothing_is_said_with_the_order_that_compiles(tmp_path):
    """torch.compile(DDP(net)) on DDP's C++ reducer (the aot mode, as under python): torch 2.13's
    Dynamo gives up at DDP's `_inside_ddp_forward` and compiles no graph, and the headline read
    only "it compiles nothing itself". It names the call and the order that compiles; the same job
    with DDP(torch.compile(net)) compiles its forward and is not told so."""
    script = ROOT / "tests" / "scripts" / "ddp_compiled_outside.py"
    env = {**os.environ, "CI": "true"}
    for inside in (False, True):
        out = tmp_path / ("inside" if inside else "outside")
        proc = subprocess.run(cagtool_cmd("run", "--modes", "aot", "--no-report", "-o", str(out), str(script),
                                          *(["--inside"] if inside else [])), capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        text = " ".join(proc.stderr.split())
        graphs = [mode_metrics(rec).forward_graphs for rec in load_run(out).modes["aot"].ranks().values()]
        if inside:
            assert all(graphs) and "compiled nothing" not in text, (graphs, text)
            continue
        assert graphs == [0, 0], graphs  # torch's own: no graph on either rank
        line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if "torch.compile(DDP(net)" in t)
        assert (f"torch.compile(DDP(module)) (ddp_compiled_outside.py:{line}) compiled nothing: Dynamo gives up on DDP's "
                "forward at `DistributedDataParallel._inside_ddp_forward`") in text, text
        assert "what to do: compile it: wrap the compiled module instead, DDP(torch.compile(module))" in text, text
        # what the reorder changes for the script's checkpoint (ddp-tutorial-series saves `model.module.state_dict()`)
        assert "its state_dict keys start with `_orig_mod.`, and `.module._orig_mod` is the module" in text, text
