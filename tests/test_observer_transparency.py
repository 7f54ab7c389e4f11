"""The compiled-autograd observer never changes the job it watches: its own failures stay inside
its hooks, the graph a script's CA compiler receives is the one torch builds without cagtool, and
the shapes of torch's own compiled-autograd tests that are hardest on an observer (an unbacked size in
the graph, higher-order gradients through a capture that raises) behave as under plain torch.
Every test drives real torch in this process (eager backend, tiny tensors)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch
from torch._dynamo import compiled_autograd as ca

from cagtool.capture.observe import graph_dump
from cagtool.capture.observe.ca_observer import CAPTURE_ERROR, CAPTURE_FAILED, OBSERVER_ERROR, CaptureObserver
from cagtool.capture.steps.tracker import StepTracker
from cagtool.record.writer import RecordWriter
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import CACompileEvent, FindingEvent


class Observed:
    """cagtool's observer and step tracker installed as in a `ca` mode process, on a record in tmp."""

    def __init__(self, tmp_path: Path) -> None:
        manifest = ModeManifest(mode="ca", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
        self.dir = tmp_path / "ca"
        self.writer = RecordWriter(self.dir, manifest)
        self.steps = StepTracker(self.writer, "ca")
        self.observer = CaptureObserver(self.writer, self.steps, None)

    def __enter__(self) -> "Observed":
        self.steps.install()
        self.observer.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.observer.uninstall()
        self.steps.uninstall()
        torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
        self.writer.close()

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = (self.dir / "events.jsonl").read_text().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        return [e for e in events if kind is None or e["kind"] == kind]


@pytest.fixture
def fresh_ca() -> Iterator[None]:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
    # torch leaves a capture's compile context entered when the capture raises (begin_capture
    # enters it, end_capture would have left it): the tests after this one start without it
    context = getattr(torch._guards._TLS, "compile_context", None)
    yield
    torch._guards._TLS.compile_context = context
    torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
    torch._dynamo.reset()


def eager_compiler(gm: Any) -> Any:
    return torch.compile(gm, backend="eager")


def train(steps: int = 3) -> list[torch.Tensor]:
    """Three backwards of a tiny model, the batch growing once (a changed-shapes miss), under
    compiled autograd; the gradients of each step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    grads = []
    with ca._enable(eager_compiler, dynamic=False):
        for step in range(steps):
            x = torch.randn(2 if step < 2 else 3, 4)
            model(x).sum().backward()
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]).clone())
            model.zero_grad()
    return grads


# -- a failure in each of cagtool's hooks stays there --------------------------------------------

def _raise(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected recorder bug")


def _fail_first_call_event(observed: Observed) -> None:
    emit = observed.writer.emit

    def failing_emit(event_cls: Any, **fields: Any) -> Any:
        if event_cls is CACompileEvent:
            raise RuntimeError("injected recorder bug")
        return emit(event_cls, **fields)

    observed.writer.emit = failing_emit  # type: ignore[method-assign]


INJECTIONS: dict[str, Callable[[Observed, pytest.MonkeyPatch], None]] = {
    "begin_capture": lambda o, mp: mp.setattr(o.observer, "_on_begin", _raise),
    "log_compile_reasons": lambda o, mp: mp.setattr(o.observer, "_on_reasons", _raise),
    "end_capture (shapes)": lambda o, mp: mp.setattr(graph_dump, "snapshot_meta", _raise),
    "end_capture (miss)": lambda o, mp: mp.setattr(o.observer, "_emit_miss", _raise),
    "graph summary": lambda o, mp: mp.setattr(graph_dump, "summarize_graph", _raise),
    "graph file": lambda o, mp: mp.setattr(o.writer, "write_graph", _raise),
    "first call": lambda o, mp: _fail_first_call_event(o),
    "verbose logger": lambda o, mp: mp.setattr(o.observer.logger, "last_message", property(_raise), raising=False),
}


@pytest.mark.parametrize("hook", list(INJECTIONS))
def test_a_failure_in_each_hook_is_counted_and_the_backward_goes_on(hook, tmp_path, fresh_ca, monkeypatch):
    expected = train()
    torch._dynamo.reset()
    with Observed(tmp_path) as observed:
        INJECTIONS[hook](observed, monkeypatch)
        got = train()
    for want, have in zip(expected, got):
        assert torch.equal(want, have)
    if hook == "verbose logger":
        # A logger whose state cannot be read is not cagtool's C++ callback failing: debug() only
        # assigns, and the misses it serves fall back to torch's reasons.
        assert observed.observer.errors >= 0
        return
    assert observed.observer.errors >= 1
    findings = [e for e in observed.events("finding") if e["code"] == OBSERVER_ERROR]
    assert len(findings) == 1, findings
    assert observed.observer.manifest_notes()["observer_errors"]["count"] == observed.observer.errors


def test_the_verbose_logger_never_raises_into_cpp():
    observer_logger = CaptureObserver.__init__.__globals__["_VerboseLogger"]()
    observer_logger.debug(None)  # C++ passes a str; nothing it passes may raise
    observer_logger.debug(b"Cache miss")
    observer_logger.debug("Cache miss due to new autograd node: X (NodeCall 1) with key size 3, previous key sizes=[]")
    assert observer_logger.last_message.startswith("Cache miss")


# -- the graph a script's own CA compiler receives ---------------------------------------------

def _graph_codes() -> list[str]:
    """The code of every CA graph a compiler that checks its graph would see, ids normalised."""
    codes: list[str] = []

    def checking_compiler(gm: Any) -> Any:
        codes.append(re.sub(r"CompiledAutograd\d+", "CompiledAutograd", gm.print_readable(print_output=False)))
        return torch.compile(gm, backend="eager")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with ca._enable(checking_compiler, dynamic=False):
        for batch in (2, 2, 3):
            model(torch.randn(batch, 4)).sum().backward()
            model.zero_grad()
    return codes


def test_the_ca_compiler_receives_the_graph_torch_builds_without_cagtool(tmp_path, fresh_ca):
    plain = _graph_codes()
    torch._dynamo.reset()
    with Observed(tmp_path) as observed:
        observed_codes = _graph_codes()
    assert len(plain) == 2  # the first capture and the changed-shapes one
    assert observed_codes == plain
    # cagtool still read the reasons and which node owns each changed size
    misses = observed.events("ca_cache_miss")
    assert [m["miss_kind"] for m in misses] == ["new_node", "changed_shapes"]
    assert all(c["node"] for c in misses[1]["changed_sizes"])
    # and which autograd node owns each graph input (torch was not asked to stamp it in the graph)
    first = observed.events("ca_graph")[0]
    nodes = json.loads((observed.dir / first["nodes_file"]).read_text())["nodes"]
    inputs = [n for n in nodes if n["args"].startswith("%inputs, ")]
    assert inputs and all(n["origin"] for n in inputs)
    assert inputs[0]["origin"] == {"node_call": 0, "name": "torch::autograd::GraphRoot"}


def _verbose_job() -> tuple[list[str], list[str]]:
    """The graph codes a checking compiler receives and torch's own verbose log, with the script
    asking for the log (compiled_autograd_verbose on as it enters `_enable`)."""
    import io
    import logging

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = torch._logging.getArtifactLogger(ca.__name__, "compiled_autograd_verbose")
    torch._logging.set_logs(compiled_autograd_verbose=True)
    logger.addHandler(handler)
    try:
        codes = _graph_codes()
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
    # FX numbers the graph modules it evaluates process-wide (`<eval_with_key>.N`)
    return codes, [re.sub(r"<eval_with_key>\.\d+", "<eval_with_key>", line) for line in stream.getvalue().splitlines() if line.strip()]


def test_a_script_that_asks_for_the_verbose_log_gets_torchs_log_and_graph(tmp_path, fresh_ca):
    plain_codes, plain_log = _verbose_job()
    torch._dynamo.reset()
    torch._C._dynamo.compiled_autograd.set_verbose_logger(None)
    with Observed(tmp_path) as observed:
        codes, log = _verbose_job()
    # torch alone stamps each input's origin into the graph when its verbose logger is set
    assert any("(NodeCall 0)" in line for line in plain_log)
    assert codes == plain_codes and log == plain_log
    assert [m["miss_kind"] for m in observed.events("ca_cache_miss")] == ["new_node", "changed_shapes"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_the_script_s_own_ca_compiler_is_named_by_what_compiled_the_graph(backend, tmp_path, fresh_ca):
    with Observed(tmp_path) as observed:
        model = torch.nn.Linear(4, 1)
        # DeepSpeed's setup: a compiler made by torch.compile without a model, the backend its own
        with ca._enable(torch.compile(backend=backend)):
            model(torch.randn(2, 4)).sum().backward()
    assert [g["compiler"] for g in observed.events("ca_graph")] == [f"script:{backend}"]


def test_a_graphs_later_backwards_call_it_from_torchs_frame_and_its_first_call_is_timed_once(tmp_path, fresh_ca):
    """The compiled graph's first call is timed (its ca_compile event); every later backward calls
    the graph straight from torch's runtime_wrapper, with no frame of cagtool's between."""
    import sys

    callers: list[str] = []

    def compiler(gm: Any) -> Any:
        compiled = torch.compile(gm, backend="eager")

        def graph(*args: Any) -> Any:
            callers.append(sys._getframe(1).f_code.co_name)
            return compiled(*args)

        return graph

    with Observed(tmp_path) as observed:
        model = torch.nn.Linear(4, 1)
        with ca._enable(compiler, dynamic=False):
            for _ in range(5):
                model(torch.randn(2, 4)).sum().backward()
    # two graphs: the first backward's (no .grad yet) and the later ones'
    timed = observed.events("ca_compile")
    assert [e["ok"] for e in timed] == [True, True] and len({e["ca_id"] for e in timed}) == 2
    assert callers == ["first_call_timer"] * 2 + ["runtime_wrapper"] * 3


# -- shapes from torch's own compiled-autograd tests -------------------------------------------

def test_an_unbacked_size_is_recorded_as_its_symbol_not_int():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        mask = mode.from_tensor(torch.tensor([True, False, True]))
        picked = torch.nonzero(mask)  # data-dependent first size: unbacked u0
    size = picked.shape[0]
    with pytest.raises(Exception, match="data-dependent|GuardOnDataDependent|Could not guard"):
        int(size)
    shape, dtype, stride = graph_dump.tensor_meta(picked)
    assert shape[0] == str(size) and shape[0].startswith("u") and shape[1] == 1
    assert dtype == "int64" and stride is not None


def _higher_order_job() -> list[str]:
    """torch's higher-order gradients shape: `autograd.grad(create_graph=True)` through an
    AOT-compiled forward raises inside the CA capture; the script catches it and tries again."""
    f = torch.compile(lambda x: (x.sin() * x).sum(), backend="aot_eager")
    x = torch.randn(3, requires_grad=True)
    outcomes = []
    with ca._enable(eager_compiler):
        for _ in range(3):
            try:
                torch.autograd.grad(f(x), x, create_graph=True)
                outcomes.append("ok")
            except RuntimeError as exc:
                outcomes.append(str(exc).splitlines()[0])
    return outcomes


def test_higher_order_gradients_through_a_failed_capture_fail_as_under_plain_torch(tmp_path, fresh_ca):
    from torch._dynamo.utils import counters

    plain = _higher_order_job()
    plain_captures = counters["compiled_autograd"]["captures"]
    plain_context = getattr(torch._guards._TLS, "compile_context", None)
    torch._dynamo.reset()
    counters.clear()
    with Observed(tmp_path) as observed:
        observed_outcomes = _higher_order_job()
        # torch frees a failed capture's object at once, and with it leaves its compile context;
        # cagtool holds no reference that would keep it entered (later compiles would carry its id)
        assert getattr(torch._guards._TLS, "compile_context", None) is plain_context is None
    assert plain == ["torch.compile does not currently support higher order gradients."] * 3
    assert observed_outcomes == plain  # not torch's INTERNAL ASSERT on the second try
    assert counters["compiled_autograd"]["captures"] == plain_captures == 3
    # Counted as torch counts them: every capture is a miss in the record, and one finding says
    # why the reasons stop after the first.
    misses = observed.events("ca_cache_miss")
    assert len(misses) == 3
    assert misses[0]["miss_kind"] == "new_node" and {m["message"] for m in misses[1:]} == {"no cache-miss reason reported by torch"}
    # ... and one per failed capture says what it raised, as it left the backward for the script
    # (the second and third from the backward run again without the logger)
    failed, *errors = observed.events("finding")
    assert [failed["code"]] + [e["code"] for e in errors] == [CAPTURE_FAILED] + [CAPTURE_ERROR] * 3
    assert [e["detail"] for e in errors] == [{"compile_id": f"!{n}", "error_type": "RuntimeError", "error": plain[0]} for n in range(3)]
    for error in errors:
        assert error["source"]["code"] == "torch.autograd.grad(f(x), x, create_graph=True)" and error["source"]["how"] == "backward_call"
    assert observed.observer.manifest_notes() == {"failed_ca_captures": 3}
    # the second and third tries walked the failed graph again: torch's assert there, run again without the logger
    assert observed.observer.walks_without_logger == 2 and not observed.observer.reasons_stopped


def _failed_then_missing_job() -> tuple[list[str], list[torch.Tensor]]:
    """tests/scripts/ca_failed_capture_then_misses.py's job, in this process: two higher-order tries
    whose capture raises, then a model's backwards under compiled autograd, a new graph whose batch
    grows once. The outcomes, and the model's weights at the end."""
    f = torch.compile(lambda x: (x.sin() * x).sum(), backend="aot_eager")
    x = torch.randn(3, requires_grad=True)
    outcomes = []
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ca._enable(eager_compiler, dynamic=False):
        for _ in range(2):
            try:
                torch.autograd.grad(f(x), x, create_graph=True)
                outcomes.append("ok")
            except RuntimeError as exc:
                outcomes.append(str(exc).splitlines()[0])
        for batch in (2, 2, 3):
            model(torch.randn(batch, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    return outcomes, [p.detach().clone() for p in model.parameters()]


def test_misses_after_a_failed_capture_keep_torchs_reasons(tmp_path, fresh_ca):
    """A capture that raised does not cost the rest of the process its miss reasons: the failed
    graph's next walk (where torch asserts with a verbose logger set) runs without cagtool's logger,
    and the later misses (a new graph, then newly dynamic sizes) are recorded in torch's words. The
    outcomes, weights and torch's counters are plain torch's."""
    from torch._dynamo.utils import counters

    plain, plain_weights = _failed_then_missing_job()
    plain_counts = dict(counters["compiled_autograd"])
    torch._dynamo.reset()
    counters.clear()
    with Observed(tmp_path) as observed:
        outcomes, weights = _failed_then_missing_job()
    assert plain == outcomes == ["torch.compile does not currently support higher order gradients."] * 2
    assert all(torch.equal(a, b) for a, b in zip(plain_weights, weights))
    assert dict(counters["compiled_autograd"]) == plain_counts == {"captures": 4}
    misses = observed.events("ca_cache_miss")
    assert [m["miss_kind"] for m in misses] == ["new_node", "unknown", "new_node", "changed_shapes"]
    assert misses[1]["message"] == "no cache-miss reason reported by torch"  # torch has none: the failed graph again
    assert misses[2]["node"] == "torch::autograd::GraphRoot" and misses[3]["total_changed"] == 6
    assert observed.observer.walks_without_logger == 1
    assert observed.observer.manifest_notes() == {"failed_ca_captures": 2}
    assert [e["code"] for e in observed.events("finding")] == [CAPTURE_FAILED, CAPTURE_ERROR, CAPTURE_ERROR]
    assert "later misses keep their reasons" in observed.events("finding")[0]["message"]


def test_a_failed_capture_outside_cagtools_entry_point_takes_the_logger_away(tmp_path, fresh_ca):
    """Where the backward entry point is not cagtool's when a capture raises (the job put torch's
    back), no re-run could catch torch's assert: the logger goes for good, as before, and the job
    never meets the assert."""
    from torch.autograd import graph as autograd_graph

    plain, _ = _failed_then_missing_job()
    torch._dynamo.reset()
    with Observed(tmp_path) as observed:
        entry = torch.autograd._engine_run_backward
        torch.autograd._engine_run_backward = autograd_graph._engine_run_backward = observed.steps._original_run_backward
        try:
            outcomes, _ = _failed_then_missing_job()
        finally:
            torch.autograd._engine_run_backward = autograd_graph._engine_run_backward = entry
    assert outcomes == plain
    assert observed.observer.reasons_stopped and observed.observer.walks_without_logger == 0
    assert [m["miss_kind"] for m in observed.events("ca_cache_miss")] == ["new_node"] + ["unknown"] * 3
    assert "no cache-miss reasons" in observed.events("finding")[0]["message"]


@pytest.mark.slow
def test_a_run_with_failed_captures_counts_them_and_reads_undamaged(tmp_path):
    import subprocess
    import sys

    from cagtool.record.integrity import run_damage
    from cagtool.record.loader import load_run
    from cagtool.report.figures.metrics import mode_metrics

    root = Path(__file__).resolve().parent.parent
    script = str(root / "tests" / "scripts" / "higher_order_grads.py")
    plain = subprocess.run([sys.executable, "-c", "import runpy, sys, torch; from torch._dynamo import compiled_autograd as ca; sys.argv = sys.argv[1:]\n"
                            "with ca._enable(lambda gm: torch.compile(gm, backend='eager'), dynamic=False): runpy.run_path(sys.argv[0], run_name='__main__')", script],
                           capture_output=True, text=True, cwd=root, timeout=600)
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script],
                         capture_output=True, text=True, cwd=root, timeout=600)
    assert plain.returncode == run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == plain.stdout == "torch.compile does not currently support higher order gradients.\n" * 3
    record = load_run(tmp_path / "r")
    assert run_damage(record) == []
    ca_mode = record.mode("ca")
    assert ca_mode.manifest.options["failed_ca_captures"] == 3
    assert mode_metrics(ca_mode).autograd_captures == 3
    # every capture torch counted is in the record with the miss that caused it
    from cagtool.record.schema import CacheMissEvent

    assert len(ca_mode.of(CacheMissEvent)) == 3
    # each failed capture's error, the recaptures' (raised in the backward run again without the logger) included
    assert [f.code for f in ca_mode.of(FindingEvent)] == [CAPTURE_FAILED, CAPTURE_ERROR, CAPTURE_ERROR, CAPTURE_ERROR]


@pytest.mark.slow
def test_a_run_after_a_failed_capture_records_later_misses_with_torchs_reasons(record_run):
    """`cagtool run --modes ca` of a job whose first backwards fail in the CA capture (caught), then
    train: stdout (its own count of steps included) and torch's CA counters are plain python's
    under compiled autograd, and the later misses have torch's reasons. The session's recording of
    the job, which tests/report/recompiles/test_counted_words.py reads too."""
    import subprocess
    import sys

    from plain_counters import WRAPPER

    from conftest import cli_in_process

    from cagtool.record.loader import load_run
    from cagtool.record.schema import CacheMissEvent, StepEvent

    root = Path(__file__).resolve().parent.parent
    script = "tests/scripts/ca_failed_capture_then_misses.py"
    plain = subprocess.run([sys.executable, "-c", WRAPPER, "1", script], capture_output=True, text=True, cwd=root, timeout=600)
    run = record_run("../tests/scripts/ca_failed_capture_then_misses.py")
    assert plain.returncode == run.returncode == 0, run.stderr[-3000:]
    *plain_lines, counters_line = plain.stdout.splitlines()
    assert run.stdout.splitlines() == plain_lines
    assert plain_lines[-1] == "steps 4"
    ca_mode = load_run(run.path).mode("ca")
    assert ca_mode.manifest.torch_counters["compiled_autograd"] == json.loads(counters_line)["compiled_autograd"] == {"captures": 4}
    assert [m.miss_kind for m in ca_mode.of(CacheMissEvent)] == ["new_node", "unknown", "new_node", "changed_shapes"]
    assert [s.boundary for s in ca_mode.of(StepEvent)].count("optimizer") == 4
    assert [f.code for f in ca_mode.of(FindingEvent)] == [CAPTURE_FAILED, CAPTURE_ERROR, CAPTURE_ERROR]
    # What the user reads: the captures add up to torch's 4, and the recapture after the failed one
    # is named for what it is, not sent to record again for a reason torch never gives.
    code, summary, err = cli_in_process("summary", str(run.path))
    assert code == 0, err
    assert ("CA graphs: 2 (4 captures: 1 initial, 1 for a new autograd node, 1 recompile for changed sizes, 1 recaptured "
            "after a failed capture; 2 raised before a graph) (torch counted 4 captures); CA recompiles: 3") in " ".join(summary.split())
    # the advice on top is the first cause with something to do: the failed capture's (its error reached the script)
    assert "what to do: Fix the failed capture and this recapture goes with it: compiled autograd cannot capture" in " ".join(summary.split())
    code, explain, err = cli_in_process("recompiles", str(run.path), "--explain", "--format", "json")
    assert code == 0, err
    unknown = [c for c in json.loads(explain)["modes"]["ca"]["explanation"]["causes"] if c["code"] == "unknown"]
    assert [c["title"] for c in unknown] == ["Recaptured after a failed capture (1 recompile)"]
    assert "The captures of !0 and !1 (the backward called at tests/scripts/ca_failed_capture_then_misses.py:13 " in unknown[0]["why"][0]
    assert "(!1)" in unknown[0]["why"][0]
    assert unknown[0]["fix"][0].startswith("Fix the failed capture and this recapture goes with it:")
    assert not any("Record again" in f for f in unknown[0]["fix"])


def test_a_counter_torch_never_incremented_reads_zero_not_unknown(tmp_path):
    from cagtool.record.loader import load_mode
    from cagtool.record.schema import STATUS_FINISHED, STATUS_KILLED
    from cagtool.report.figures.metrics import mode_metrics

    def metrics_of(name: str, counters: dict, status: str) -> Any:
        manifest = ModeManifest(mode="aot", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
        writer = RecordWriter(tmp_path / name, manifest)
        manifest.torch_counters = counters
        manifest.status = status
        writer.write_manifest()
        writer.close()
        return mode_metrics(load_mode(tmp_path / name))

    # a job that compiled nothing: torch's counters["stats"]["unique_graphs"] reads 0
    finished = metrics_of("finished", {"frames": {"total": 3}}, STATUS_FINISHED)
    assert (finished.unique_graphs, finished.autograd_captures) == (0, 0)
    killed = metrics_of("killed", {}, STATUS_KILLED)  # never saved its counters: unknown
    assert (killed.unique_graphs, killed.autograd_captures) == (None, None)



@pytest.mark.slow
def test_the_frames_dynamo_is_offered_inside_a_capture_are_those_of_plain_python(record_run):
    """cagtool's capture hooks once turned Dynamo's callback off for torch's whole capture (a
    recursive torch._dynamo.disable): a job setting the config flag, its backward inside a compiled
    function, counted 63 frames under cagtool against 941 under python (most of them the first
    capture's imports and sympy, offered to Dynamo). The count varies between plain runs by a few
    frames (936-946 seen): the two must agree within that, and captures and graphs exactly."""
    import subprocess
    import sys

    from conftest import ROOT

    script = ROOT / "tests" / "scripts" / "config_flag_backward.py"
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    run = record_run("../tests/scripts/config_flag_backward.py")
    assert run.returncode == 0, run.stderr[-2000:]
    before, under = json.loads(plain.stdout.splitlines()[-1]), json.loads(run.stdout.splitlines()[-1])
    assert (under["captures"], under["graphs"]) == (before["captures"], before["graphs"])
    assert before["frames"] > 100  # the capture's frames are offered at all
    assert abs(under["frames"] - before["frames"]) <= 0.05 * before["frames"], (under, before)


# -- the step tracker's optimizer hooks, as Dynamo sees them -------------------------------------

def _hook_tables() -> tuple[Any, Any]:
    from torch.optim import optimizer as optimizer_module

    return optimizer_module._global_optimizer_pre_hooks, optimizer_module._global_optimizer_post_hooks


def test_the_optimizer_hooks_are_out_of_torchs_dicts_during_a_compiled_call_and_back_in_order(tmp_path, fresh_ca):
    """Inside a torch.compile'd call (where Dynamo traces and checks its guards) torch's global
    optimizer hook dicts hold the script's hooks alone, also inside a nested compiled call; inside a
    function torch._dynamo.disable made after cagtool's install, called there, cagtool's are back
    (Dynamo traces nothing there); after the call they are where they were, between the script's
    registered before and after them, and an eager step() is seen by them."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre, post = _hook_tables()

    def mine(o: Any, a: Any, k: Any) -> None:
        return None

    def mine_too(o: Any, a: Any, k: Any) -> None:
        return None

    inside: list[list[list[Any]]] = []
    inner: list[Any] = []

    @torch._dynamo.disable
    def look(x: torch.Tensor) -> torch.Tensor:
        inside.append([list(pre.values()), list(post.values())])
        x = inner[0](x)  # a compiled call of its own, inside this one
        inside.append([list(pre.values()), list(post.values())])
        return x

    before = register_optimizer_step_pre_hook(mine)
    try:
        with Observed(tmp_path) as observed:
            after = register_optimizer_step_post_hook(mine_too)
            try:
                shown = [list(pre.values()), list(post.values())]
                assert len(shown[0]) == len(shown[1]) == 2 and shown[0][0] is mine and shown[1][1] is mine_too
                inner.append(torch.compile(lambda x: x * 2, backend="eager"))

                @torch._dynamo.disable
                def look_again(x: torch.Tensor) -> torch.Tensor:
                    inside.append([list(pre.values()), list(post.values())])
                    x = inner[0](x)  # a compiled call inside it: shown again after it
                    inside.append([list(pre.values()), list(post.values())])
                    return x

                outer = torch.compile(lambda x: look_again(look(x + 1)) - 1, backend="eager")
                model = torch.nn.Linear(3, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for _ in range(2):
                    model(outer(torch.ones(2, 3))).sum().backward()
                    opt.step()
                assert inside == [[[mine], [mine_too]], [[mine], [mine_too]], shown, shown] * 2
                assert [list(pre.values()), list(post.values())] == shown
            finally:
                after.remove()
    finally:
        before.remove()
    assert [s["boundary"] for s in observed.events("step")] == ["optimizer", "optimizer"]
    assert [list(pre.values()), list(post.values())] == [[], []]


def test_a_tracker_uninstalled_inside_a_compiled_call_leaves_no_hook_behind(tmp_path, fresh_ca):
    """Uninstalled while its hooks are out of the dicts (the Python API's block ended inside a
    compiled call): the compiled call's end does not put them back."""
    pre, post = _hook_tables()
    observed = Observed(tmp_path)
    observed.steps.install()
    uninstalled: list[int] = []

    @torch._dynamo.disable
    def end_block(x: torch.Tensor) -> torch.Tensor:
        observed.steps.uninstall()
        uninstalled.append(len(pre) + len(post))
        return x

    try:
        torch.compile(lambda x: end_block(x + 1), backend="eager")(torch.ones(2))
    finally:
        observed.writer.close()
    assert uninstalled == [0]
    assert (len(pre), len(post)) == (0, 0)


# One compiled optimizer a process, fullgraph=True's failed compile before any and after one, and a
# compiled optimizer made after an earlier one's compile and collection, with eager steps between.
_SHAPE_GROUPS = [("fullgraph", "eager", "disabled"), ("one",), ("two",), ("whole",), ("scaler",), ("limit",),
                 ("one", "fullgraph", "eager", "whole")]


@pytest.mark.slow
@pytest.mark.parametrize("variants", _SHAPE_GROUPS, ids=["-".join(g) for g in _SHAPE_GROUPS])
def test_optimizer_steps_compile_as_under_plain_python_and_count_the_scripts_steps(variants, tmp_path):
    """`cagtool run --modes aot` of optimizer steps as torch.compile meets them
    (tests/scripts/compiled_optimizer_shapes.py: a compiled step, a GAN's two, fullgraph=True, a
    whole compiled training step, a GradScaler's skipping one inside it, eager steps beside a
    compiled model, a step past the recompile limit, one in a torch.compiler.disable'd function
    called from compiled code): each variant's torch counters (frames, graph
    breaks, unique graphs, calls captured) and recompile reasons are plain python's, and the steps
    are the script's, three a variant, the scaler's skipped one skipped."""
    from plain_counters import plain_and_recorded

    from cagtool.record.schema import StepEvent

    plain, run, record = plain_and_recorded("tests/scripts/compiled_optimizer_shapes.py", variants, tmp_path / "r")
    lines = {line.split(" ", 1)[0]: line for line in plain.splitlines() if line.split(" ", 1)[0] in variants}
    assert list(lines) == list(variants)
    assert run.stdout == plain
    if "two" in variants:  # the second optimizer's two frames, each guarded on `self`: no third
        assert len(json.loads(lines["two"].split(" ", 1)[1].split(" weights ")[0])["recompile_reasons"]) == 2
    steps = record.mode("aot").of(StepEvent)
    assert [s.step for s in steps] == list(range(3 * len(variants)))
    assert [s.skipped for s in steps] == ([False, True, False] if variants == ("scaler",) else [False] * len(steps))


_REFUSES = "tests/scripts/ca_compiler_refuses.py"


def _plain_and_recorded(tmp_path_factory, how: str, counted: bool = True):
    """tests/scripts/ca_compiler_refuses.py HOW run by plain python (it turns compiled autograd on
    itself, with its own compiler; `counted`: with torch's counters printed last, else as
    `python SCRIPT HOW`) and by `cagtool run --modes ca`: (plain, recorded, its ca record). Both
    are run once per session (recorded_once): the tests that read the same HOW share them, each
    with its own copy of the record."""
    import subprocess
    import sys

    from plain_counters import WRAPPER

    from conftest import recorded_once

    from cagtool.record.loader import load_run

    root = Path(__file__).resolve().parent.parent
    python = [sys.executable, "-c", WRAPPER, "0"] if counted else [sys.executable]

    def record(directory: Path) -> dict:
        plain = subprocess.run([*python, _REFUSES, how], capture_output=True, text=True, cwd=root, timeout=600)
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "ca", "--backend", "eager", "--no-report", "-o",
                              str(directory / "r"), _REFUSES, how], capture_output=True, text=True, cwd=root, timeout=600)
        return {name: [proc.returncode, proc.stdout, proc.stderr] for name, proc in (("plain", plain), ("run", run))}

    copy, value = recorded_once(tmp_path_factory, f"ca-compiler-refuses-{how}-{int(counted)}", record)
    plain, run = (subprocess.CompletedProcess(name, *value[name]) for name in ("plain", "run"))
    return plain, run, load_run(copy / "r").mode("ca")


def _backward_line(how: str) -> int:
    call = "torch.autograd.grad(x.sin().sum(), x)" if how == "grad" else "x.sin().sum().backward()"
    lines = (Path(__file__).resolve().parent.parent / _REFUSES).read_text().splitlines()
    [line] = [n for n, text in enumerate(lines, 1) if text.strip() == call]
    return line


@pytest.mark.slow
@pytest.mark.parametrize("how, error_type", [("backward", "TypeError"), ("grad", "ValueError"), ("thread", "TypeError")])
def test_a_capture_that_raises_any_error_is_recorded_with_it_and_the_script_sees_it_unchanged(how, error_type, tmp_path_factory):
    """The job's own compiler refuses a graph: the capture raises the compiler's error (not a
    RuntimeError), through `.backward()`, through `torch.autograd.grad`, or in a thread of the job's,
    and the job catches it and goes on. The job sees the error plain python shows (its type, message
    and the last frames of its traceback: torch's end_capture, then the compiler, nothing of
    cagtool's between), torch's counters are plain python's, and the record names each failed
    capture's error with the user's backward line."""
    plain, run, ca_mode = _plain_and_recorded(tmp_path_factory, how)
    assert plain.returncode == run.returncode == 0, run.stderr[-3000:]
    *plain_lines, counters_line = plain.stdout.splitlines()
    assert run.stdout.splitlines() == plain_lines
    message = "picky_compiler refuses a graph with 1 sin"
    assert plain_lines == [f"{error_type} {message} ['compiled_autograd.py:end_capture', 'ca_compiler_refuses.py:picky_compiler']"] * 2 + ["steps 3"]
    assert ca_mode.manifest.torch_counters["compiled_autograd"] == json.loads(counters_line)["compiled_autograd"]
    errors = [f for f in ca_mode.of(FindingEvent) if f.code == CAPTURE_ERROR]
    assert [(f.detail["compile_id"], f.detail["error_type"], f.detail["error"]) for f in errors] == [
        ("!0", error_type, message), ("!1", error_type, message)]
    assert all(f.message == f"the compiled-autograd capture of {f.detail['compile_id']} raised {error_type}: {message}" for f in errors)
    line = _backward_line(how)
    assert [(Path(f.source.file).name, f.source.line) for f in errors] == [("ca_compiler_refuses.py", line)] * 2


@pytest.mark.slow
def test_a_capture_error_that_ends_the_job_is_recorded_and_its_traceback_is_plain_pythons(tmp_path_factory):
    """An `assert` in the job's own compiler, not caught: the job dies of the AssertionError with
    plain python's exit code and traceback tail (from torch's end_capture on), and the record names it."""
    plain, run, ca_mode = _plain_and_recorded(tmp_path_factory, "assert", counted=False)
    assert plain.returncode == run.returncode == 1
    plain_err, run_err = plain.stderr.splitlines(), run.stderr.splitlines()
    start = next(i for i, text in enumerate(plain_err) if "compiled_autograd.py" in text and text.endswith("in end_capture"))
    tail = plain_err[start:]
    assert tail[-1] == "AssertionError: picky_compiler takes no sin (1 in this graph)"
    run_start = next(i for i, text in enumerate(run_err) if "compiled_autograd.py" in text and text.endswith("in end_capture"))
    assert run_err[run_start:run_start + len(tail)] == tail
    [error] = [f for f in ca_mode.of(FindingEvent) if f.code == CAPTURE_ERROR]
    assert (error.detail["error_type"], error.detail["error"]) == ("AssertionError", "picky_compiler takes no sin (1 in this graph)")
    assert (Path(error.source.file).name, error.source.line) == ("ca_compiler_refuses.py", _backward_line("assert"))


@pytest.mark.slow
def test_the_recapture_after_a_capture_of_another_error_type_is_named_for_what_it_is(tmp_path_factory):
    """The failed graph comes back and torch captures it again, with no cache-miss reason by
    design: `recompiles --explain`, the headline and the summary name it a recapture after a failed
    capture, with the error the compiler raised, not a recompile with "no reason recorded"."""
    from conftest import cli_in_process

    plain, run, ca_mode = _plain_and_recorded(tmp_path_factory, "backward")
    assert run.returncode == 0, run.stderr[-3000:]
    record = ca_mode.path.parent
    code, out, err = cli_in_process("recompiles", str(record), "--explain", "--format", "json")
    assert code == 0, err
    [recapture] = [c for c in json.loads(out)["modes"]["ca"]["explanation"]["causes"] if c["code"] == "unknown"]
    assert recapture["title"] == "Recaptured after a failed capture (1 recompile)"
    line = _backward_line("backward")
    assert recapture["why"][0].startswith(f"The captures of !0 and !1 (the backward called at {_REFUSES}:{line}  x.sin().sum().backward()) "
                                          'each raised TypeError: "picky_compiler refuses a graph with 1 sin"'), recapture["why"][0]
    code, out, err = cli_in_process("summary", str(record))
    text = " ".join(out.split())
    assert code == 0, err
    assert "a graph recaptured after a failed capture" in text and "1 recaptured after a failed capture" in text
    assert "no reason recorded" not in text and "for a reason torch did not log" not in text
    assert "finding: the compiled-autograd capture of !0 raised TypeError: picky_compiler refuses a graph with 1 sin" in text
    # the error, raised twice from one line, is one finding that says so; each capture's row names what it was
    assert ("finding: the compiled-autograd capture of !0 raised TypeError: picky_compiler refuses a graph with 1 sin "
            f"(ca_compiler_refuses.py:{line}) - 2 times in all, the last at step 1 (!0, !1)") in text
    assert text.count("finding: the compiled-autograd capture of") == 1
    assert ("!1 recaptured after a failed capture (!0; torch gives no reason for it); this capture raised "
            f"(its error: the findings below) (ca_compiler_refuses.py:{line})") in text
    assert "no cache-miss reason reported by torch" not in text
    # the graph a capture made: its size and capture time, on its row
    from cagtool.record.schema import CAGraphEvent

    [graph] = ca_mode.of(CAGraphEvent)
    assert graph.node_count > len(graph.autograd_nodes) > 0
    assert (f"{graph.compile_id} new node SumBackward0 (NodeCall 1), key size 27, previous key sizes [27] [{graph.node_count:,} graph nodes "
            f"from {len(graph.autograd_nodes):,} autograd nodes, captured in {graph.capture_s:.2f} s]") in text


def test_a_forward_that_makes_a_module_or_registers_a_hook_compiles_as_under_plain_python(tmp_path):
    """cagtool's module and parameter registration hooks (the gradient digests' parameter names) and
    its taps on Module.register_*_hook were cagtool's skipped frames to a compiled forward: a
    forward that slices its nn.ModuleList (every transformers model's `self.layers[:n]`, a new
    ModuleList made by add_module) broke its graph on `ParamNames._on_module` where plain python
    has no hook (an HF Trainer job with torch_compile: 10 such breaks, the graph breaks and graphs
    of the checkpointed layers after them changed), and a hook registered inside the forward
    offered Dynamo 8 stdlib frames more. Each mode's counters (graph breaks and their reasons,
    graphs, frames) are now those of the script run by python, compiled autograd on by hand for ca."""
    import subprocess
    import sys

    from plain_counters import WRAPPER

    from conftest import ROOT

    script = "tests/scripts/module_list_slice.py"
    plain = [subprocess.run([sys.executable, "-c", WRAPPER, flag, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
             for flag in ("0", "1")]
    assert all(p.returncode == 0 for p in plain), [p.stderr[-2000:] for p in plain]
    run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot,ca", "--backend", "eager", "--no-report", "-o",
                          str(tmp_path / "r"), script], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    aot, ca = (json.loads(line) for line in run.stdout.splitlines() if line.startswith("{"))
    before_aot, before_ca = (json.loads(p.stdout.splitlines()[0]) for p in plain)
    assert before_aot["graph_breaks"] == 1 and "ParamNames" not in str(aot["reasons"])  # the hook's own break, not cagtool's

    def same(counts: dict) -> dict:
        # The break's text names RemovableHandle.next_id's value: cagtool's own hooks took handles before it.
        return {**counts, "reasons": [re.sub(r"int: \d+", "int: N", reason) for reason in counts["reasons"]]}

    assert (same(aot), same(ca)) == (same(before_aot), same(before_ca))
