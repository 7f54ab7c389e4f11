"""Pins, on the installed torch, each private behaviour and message format cagtool relies on
(docs/torch-internals.md). Every test drives real torch (eager backend, tiny tensors) and reads
what torch produced with cagtool's own parsers, so a torch upgrade that changes a format fails
here, by name, before it silently empties a report."""

from __future__ import annotations

import inspect
import json
import logging
import operator
import os
import re
import subprocess
import sys
import textwrap
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
import torch
from torch._dynamo import compiled_autograd as ca

from cagtool.capture.observe import graph_dump
from cagtool.torch_text import parse_miss
from cagtool.capture.observe.torch_logs import TRACE_LOGGER, StructuredLogHandler
from cagtool.torch_text import compile_id_of
from cagtool.record.loader import load_mode
from cagtool.record.manifest import ModeManifest
from cagtool.record.schema import DynamoCompileEvent, DynamoRecompileEvent, GraphBreakEvent
from cagtool.report.recompiles.reads import limit_hits
from cagtool.torch_text import backward_function_class, compile_attempt, compile_frame, random_module_call

NEW_NODE = re.compile(r"^Cache miss due to new autograd node: \S+ \(NodeCall \d+\) with key size \d+, previous key sizes=\[[\d, ]*\]$")
CHANGED = re.compile(r"^Cache miss due to (\d+) changed tensor shapes \(total of \d+\): sizes\[\d+\](, sizes\[\d+\])*$")


@contextmanager
def structured_records() -> Iterator[list[tuple[dict[str, Any], Any]]]:
    """(metadata, payload) of every record torch sends to its structured logger, without TORCH_TRACE."""
    records: list[tuple[dict[str, Any], Any]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if isinstance(getattr(record, "metadata", None), dict):
                records.append((record.metadata, getattr(record, "payload", None)))

    handler = Collect(level=logging.DEBUG)
    logger = logging.getLogger(TRACE_LOGGER)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


@dataclass
class CACapture:
    messages: list[str] = field(default_factory=list)  # what C++ passed to the verbose logger
    begin_args: list[tuple[list[int], Any]] = field(default_factory=list)  # (sizes, origins) per capture
    graphs: list[Any] = field(default_factory=list)  # the GraphModules the compiler received
    records: list[tuple[dict[str, Any], Any]] = field(default_factory=list)


def run_under_ca(*backwards: Callable[[], None]) -> CACapture:
    """Each callable runs one backward inside _enable (eager backend, static sizes), with a verbose
    logger installed and begin_capture observed, the way cagtool's observer does it."""
    out = CACapture()

    class VerboseLogger:
        def debug(self, message: str, *args: Any) -> None:
            out.messages.append(message)

    logger = VerboseLogger()  # C++ keeps a borrowed pointer: alive until reset
    original = ca.AutogradCompilerInstance.begin_capture

    def begin_capture(inst, inputs, sizes, scalars, origins, *args, **kwargs):
        out.begin_args.append((list(sizes), origins))
        return original(inst, inputs, sizes, scalars, origins, *args, **kwargs)

    def compiler(gm: Any) -> Any:
        out.graphs.append(gm)
        return torch.compile(gm, backend="eager")

    ca.AutogradCompilerInstance.begin_capture = begin_capture
    torch._C._dynamo.compiled_autograd.set_verbose_logger(logger)
    try:
        with structured_records() as records, ca._enable(compiler, dynamic=False):
            for backward in backwards:
                backward()
        out.records = records
    finally:
        ca.AutogradCompilerInstance.begin_capture = original
        torch._dynamo.reset()
    return out


def mul_backward(n: int = 2) -> Callable[[], None]:
    def run() -> None:
        x = torch.ones(n, 3, requires_grad=True)
        (x * 2).sum().backward()

    return run


def add_backward(n: int = 2) -> Callable[[], None]:
    def run() -> None:
        x = torch.ones(n, 3, requires_grad=True)
        (x + 1).sum().backward()

    return run


@pytest.fixture(scope="module")
def three_captures() -> CACapture:
    """GraphRoot miss, a new node (mul -> add), a repeated backward (hit), changed shapes."""
    return run_under_ca(mul_backward(2), add_backward(2), add_backward(2), add_backward(3))


# -- compiled autograd: cache-miss messages ------------------------------------------------------

def test_new_node_miss_message_parses(three_captures):
    first, second = three_captures.messages[0], three_captures.messages[1]
    assert NEW_NODE.match(first) and NEW_NODE.match(second), three_captures.messages
    root, add = parse_miss(first), parse_miss(second)
    assert (root["miss_kind"], root["node"], root["node_call"]) == ("new_node", "torch::autograd::GraphRoot", 0)
    assert add["miss_kind"] == "new_node" and add["node"] == "AddBackward0" and add["key_size"] > 0
    assert isinstance(add["previous_key_sizes"], list)


def test_changed_shapes_miss_message_parses_and_origins_name_each_size(three_captures):
    message = three_captures.messages[-1]
    match = CHANGED.match(message)
    assert match, three_captures.messages
    parsed = parse_miss(message)
    assert parsed["miss_kind"] == "changed_shapes" and len(parsed["indices"]) == int(match.group(1)) > 0
    # begin_capture's origins[1][i] is (NodeCall, autograd node name) of sizes[i]: how a changed
    # size is tied to the node that owns it.
    sizes, origins = three_captures.begin_args[-1]
    assert len(origins[1]) == len(sizes) > max(parsed["indices"])
    for index in parsed["indices"]:
        node_call, name = origins[1][index]
        assert isinstance(node_call, int) and name.endswith("Backward0")


def test_one_capture_per_miss_and_a_hit_leaves_nothing(three_captures):
    misses = [m for m in three_captures.messages if m.startswith("Cache miss")]
    assert len(misses) == len(three_captures.graphs) == len(three_captures.begin_args) == 3


def test_compile_reasons_artifact_is_a_json_list_with_ids_newest_last(three_captures):
    reasons = [(meta, payload) for meta, payload in three_captures.records
               if meta.get("artifact", {}).get("name") == "compiled_autograd_compile_reasons"]
    assert len(reasons) == 3
    for index, (meta, payload) in enumerate(reasons):
        listed = json.loads(payload) if isinstance(payload, str) else payload
        assert meta["compiled_autograd_id"] == index and compile_id_of(meta) == f"!{index}"
        newest = listed[-1]
        assert newest.startswith(f"!{index}: Cache miss due to ")
        assert parse_miss(re.sub(r"^!\d+: ", "", newest))["miss_kind"] in ("new_node", "changed_shapes")


# -- compiled autograd: the graph ------------------------------------------------------------------

def test_graph_class_names_the_ca_id_and_nodes_name_their_autograd_node(three_captures):
    assert [type(gm).__name__ for gm in three_captures.graphs] == ["CompiledAutograd0", "CompiledAutograd1", "CompiledAutograd2"]
    summary = graph_dump.summarize_graph(three_captures.graphs[0])
    names = {ref.name for ref in summary.autograd_nodes}
    assert {"torch::autograd::GraphRoot", "MulBackward0", "torch::autograd::AccumulateGrad"} <= names
    last_lines = [n.meta["stack_trace"].strip().splitlines()[-1].strip() for n in three_captures.graphs[0].graph.nodes if n.meta.get("stack_trace")]
    assert "MulBackward0 (NodeCall 2)" in last_lines or any(re.fullmatch(r"MulBackward0 \(NodeCall \d+\)", line) for line in last_lines)


def test_accumulate_grad_reads_its_parameter_from_inputs_and_origins_pair_a_nodecall_with_another_name():
    """What naming an AccumulateGrad's parameter rests on: `call_accumulate_grad(getitem(inputs, i),
    ...)` stamped `...AccumulateGrad (NodeCall k)`, and `inputs[i]` at begin_capture is the
    parameter itself. begin_capture's origins give each input the NodeCall torch stamps, but C++
    names it after the node whose lookup id is that number (python_compiled_autograd.cpp,
    wrap_node_origins): here Linear's weight reads 'ReluBackward0'."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    names = {id(p): name for name, p in model.named_parameters()}
    seen: dict[str, Any] = {}
    graphs: list[Any] = []
    original = ca.AutogradCompilerInstance.begin_capture

    def begin_capture(inst, inputs, sizes, scalars, origins, *args, **kwargs):
        seen["params"] = {i: names[id(x)] for i, x in enumerate(inputs) if id(x) in names}
        seen["origins"] = [list(o) for o in origins]
        return original(inst, inputs, sizes, scalars, [[] for _ in origins], *args, **kwargs)  # as cagtool does

    def compiler(gm: Any) -> Any:
        graphs.append(gm)
        return torch.compile(gm, backend="eager")

    class Logger:
        def debug(self, message: str, *args: Any) -> None:
            pass

    logger = Logger()  # the origins come only with a verbose logger
    ca.AutogradCompilerInstance.begin_capture = begin_capture
    torch._C._dynamo.compiled_autograd.set_verbose_logger(logger)
    try:
        with ca._enable(compiler, dynamic=False):
            model(torch.randn(3, 4)).sum().backward()
    finally:
        ca.AutogradCompilerInstance.begin_capture = original
        torch._dynamo.reset()
    (gm,) = graphs
    stamps = {}
    accumulated = {}
    for node in gm.graph.nodes:
        origin = graph_dump._origin(node.meta)
        if origin is not None and not (node.target is operator.getitem and node.args[0].op == "placeholder"):
            stamps.setdefault(origin.node_call, origin.name)
        if node.target is ca.call_accumulate_grad:
            read = node.args[0]
            assert read.target is operator.getitem and read.args[0].name == "inputs" and origin.name.endswith("AccumulateGrad")
            accumulated[origin.node_call] = seen["params"][read.args[1]]
    assert sorted(accumulated.values()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    input_origins = seen["origins"][0]
    for index, name in seen["params"].items():
        call, _ = input_origins[index]
        assert accumulated[call] == name  # the NodeCall of an input's origin is the stamped one
    assert any(stamps[call] != name for call, name in input_origins), "origins now name their NodeCall: _input_origin may use them"
    summary = graph_dump.summarize_graph(gm, placeholder_origins={"inputs": input_origins}, input_params=seen["params"])
    assert {ref.node_call: ref.param for ref in summary.autograd_nodes if ref.param} == accumulated
    assert all(ref.name == stamps[ref.node_call] for ref in summary.autograd_nodes)
    assert all(n.origin is None or n.origin.name == stamps[n.origin.node_call] for n in summary.nodes)


def test_ca_graph_compiles_carry_ids_of_the_form_bang_n_f_c(three_captures):
    metrics = [meta["compilation_metrics"] for meta, _ in three_captures.records if "compilation_metrics" in meta]
    ids = [m["compile_id"] for m in metrics]
    assert len(ids) == 3 and all(re.fullmatch(r"!\d+/\d+/0", i) for i in ids), ids
    assert compile_frame(ids[0]) is not None and compile_attempt(ids[0]) == 0


# -- enabling, resetting, entry points ----------------------------------------------------------

def test_reset_inside_enable_turns_compiled_autograd_off_until_re_armed():
    from torch._dynamo.utils import counters

    def compiler(gm: Any) -> Any:
        return torch.compile(gm, backend="eager")

    counters.clear()
    try:
        with ca._enable(compiler, dynamic=False):
            mul_backward()()
            assert counters["compiled_autograd"]["captures"] == 1
            torch._dynamo.reset()  # what a script calling torch._dynamo.reset() does to cagtool
            add_backward()()
            assert counters["compiled_autograd"]["captures"] == 1, "reset no longer drops the compiler: re-arming is moot"
            torch._C._dynamo.compiled_autograd.set_autograd_compiler(lambda: ca.AutogradCompilerInstance(compiler), False)
            add_backward()()
            assert counters["compiled_autograd"]["captures"] == 2
    finally:
        torch._dynamo.reset()


def test_every_backward_goes_through_engine_run_backward_and_optimizer_hooks_fire():
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    calls: list[str] = []
    original = torch.autograd._engine_run_backward

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append("backward")
        return original(*args, **kwargs)

    torch.autograd._engine_run_backward = counting
    pre = register_optimizer_step_pre_hook(lambda opt, args, kwargs: calls.append("pre"))
    post = register_optimizer_step_post_hook(lambda opt, args, kwargs: calls.append("post"))
    try:
        w = torch.ones(3, requires_grad=True)
        (w * 2).sum().backward()
        torch.autograd.backward((w * 3).sum())
        torch.autograd.grad((w * 4).sum(), w)
        torch.optim.SGD([w], lr=0.1).step()
    finally:
        torch.autograd._engine_run_backward = original
        pre.remove()
        post.remove()
    assert calls == ["backward", "backward", "backward", "pre", "post"]


def test_a_compiled_calls_exit_hook_runs_once_its_graph_has_stepped_the_parameters(monkeypatch):
    """What the step tracker's watch at a compiled call's return relies on (capture/steps/hooks.py):
    every context torch.compile makes calls each of its `enter_exit_hooks` as the wrapper is entered
    and the cleanup that returns after the compiled code returned, outside Dynamo's tracing; a
    compiled optimizer step bumped the parameters' version counters by then (none of the
    optimizer's hooks ran); and an exception raised by the cleanup reaches the caller with the
    wrapper's state put back (the next call runs the cached graph: no new compile)."""
    from torch._dynamo.eval_frame import OptimizeContext
    from torch._dynamo.utils import counters
    from torch.optim.optimizer import register_optimizer_step_post_hook

    class Stop(BaseException):
        pass

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[tuple[int, int, bool]] = []
    stop = [False]

    def entered() -> Callable[[], None]:
        before = model.bias._version

        def returned() -> None:
            seen.append((before, model.bias._version, torch.compiler.is_compiling()))
            if stop[0]:
                raise Stop()

        return returned

    original_init = OptimizeContext.__init__

    def init(context: Any, *args: Any, **kwargs: Any) -> None:
        original_init(context, *args, **kwargs)
        context.enter_exit_hooks.append(entered)

    monkeypatch.setattr(OptimizeContext, "__init__", init)
    hooked: list[str] = []
    post = register_optimizer_step_post_hook(lambda o, a, k: hooked.append("post") if not torch.compiler.is_compiling() else None)
    try:
        step = torch.compile(opt.step, backend="eager")
        for _ in range(2):
            model(torch.ones(2, 3)).sum().backward()
            step()
        graphs = counters["stats"]["unique_graphs"]
        stop[0] = True
        model(torch.ones(2, 3)).sum().backward()
        with pytest.raises(Stop):
            step()
        stop[0] = False
        step()
    finally:
        post.remove()
    assert hooked == []  # the step ran inside the graph: no hook at run time
    assert [after > before for before, after, _ in seen] == [True] * 4 and not any(compiling for *_, compiling in seen)
    assert counters["stats"]["unique_graphs"] == graphs  # raising out of the cleanup compiled nothing again


def test_a_frame_that_traces_an_optimizers_step_lists_torchs_step_wrapper_in_its_traced_code(monkeypatch):
    """What the step tracker's watch of compiled optimizer steps starts from (capture/steps/hooks.py):
    any optimizer's step(), an Optimizer subclass of the script's own included, goes through torch's
    `profile_hook_step` wrapper (one code object for every class), and Dynamo lists it in the traced
    frame's `OutputGraph.traced_code`, still there when it calls `call_cleanup_hooks`, with no global
    hook registered (cagtool's are out of torch's dicts during compiled calls); a pre-hook of
    torch.optim's file (cagtool's `as_torchs`), where one is registered, is listed beside it and
    does not run when the compiled step runs; a frame that steps no optimizer lists neither."""
    from torch._dynamo.output_graph import OutputGraph
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    from cagtool.capture.observe.dynamo_skip import as_torchs

    ran: list[str] = []
    pre = as_torchs(register_optimizer_step_pre_hook.__code__.co_filename, lambda o, a, k: ran.append("pre"), "pre_hook")
    wrapper_code = torch.optim.Optimizer.profile_hook_step(lambda *a, **k: None).__code__
    traced: list[tuple[str, bool, bool]] = []
    original = OutputGraph.call_cleanup_hooks

    def call_cleanup_hooks(graph: Any) -> None:
        traced.append((graph.traced_code[0].co_name, any(code is wrapper_code for code in graph.traced_code),
                       any(code is pre.__code__ for code in graph.traced_code)))
        original(graph)

    monkeypatch.setattr(OutputGraph, "call_cleanup_hooks", call_cleanup_hooks)

    class Plain(torch.optim.Optimizer):
        def __init__(self, params: Any) -> None:
            super().__init__(params, {"lr": 0.1})

        @torch.no_grad()
        def step(self) -> None:
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"])

    model = torch.nn.Linear(3, 1)
    opt = Plain(model.parameters())

    @torch.compile(backend="eager")
    def forward(x: torch.Tensor) -> torch.Tensor:
        return model(x).sum()

    @torch.compile(backend="eager")
    def opt_step() -> None:
        opt.step()

    def train(steps: int) -> None:
        for _ in range(steps):
            forward(torch.ones(2, 3)).backward()
            before = model.weight._version
            opt_step()
            assert model.weight._version > before
            opt.zero_grad()

    train(2)
    assert ("opt_step", True, False) in traced and ("forward", False, False) in traced
    assert {name for name, stepped, _ in traced if stepped} == {"opt_step"}
    torch._dynamo.reset()
    traced.clear()
    handle = register_optimizer_step_pre_hook(pre)
    try:
        train(2)
    finally:
        handle.remove()
    assert ("opt_step", True, True) in traced and ("forward", False, False) in traced
    assert ran == []  # the step ran inside the graph


def test_a_compiled_optimizer_step_guards_on_the_global_pre_hooks_and_reads_them_inside_the_call():
    """What hiding cagtool's optimizer hooks during a compiled call relies on
    (capture/steps/hooks.py, _hidden_while_compiled): Dynamo reads torch's global hook dicts only
    inside torch.compile's wrapper, at the time of the call, and guards the pre-hooks' count on the
    step's frame (`len(G['_global_optimizer_pre_hooks']) == 0`): a global pre-hook registered after
    the first compiled step recompiles it, and one there only between compiled calls does not."""
    from torch._dynamo.utils import _compilation_metrics
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.compile(opt.step, backend="eager")
    _compilation_metrics.clear()

    def recompiles() -> list[str]:
        return [str(m.recompile_reason) for m in _compilation_metrics if m.recompile_reason]

    def train(between: Callable[[], None] = lambda: None) -> None:
        model(torch.ones(2, 3)).sum().backward()
        between()
        step()

    train()
    train()
    handle = register_optimizer_step_pre_hook(lambda o, a, k: None)
    handle.remove()
    train(lambda: register_optimizer_step_pre_hook(lambda o, a, k: None).remove())
    assert recompiles() == []
    handle = register_optimizer_step_pre_hook(lambda o, a, k: None)
    try:
        train()
    finally:
        handle.remove()
    assert len(recompiles()) == 1 and "len(G['_global_optimizer_pre_hooks'])" in recompiles()[0]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.01), momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.01)),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
    lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.01), fused=True),
], ids=["sgd-momentum", "adam", "adamw-foreach", "adam-fused"])
def test_a_compiled_optimizer_step_bumps_its_state_and_a_clamp_under_no_grad_does_not(backend, make):
    """What the step tracker reads for a step inside compiled code (capture/steps/tracker.py,
    _step_reading): the parameter's state tensors keep their identity and a compiled step bumps
    the version counter of at least one of them (fused Adam's kernel bumps `step`'s, not
    `exp_avg`'s); a clamp of the parameter under no_grad bumps the parameter's and none of them
    (from the first step on: before it, with no state, the parameter's is what there is to read)."""
    from cagtool.capture.steps.tracker import _step_reading
    import weakref

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    last = list(model.parameters())[-1]
    opt = make(model.parameters())
    step = torch.compile(opt.step, backend=backend)
    refs = (weakref.ref(opt), weakref.ref(last))
    readings = []
    for i in range(3):
        model(torch.randn(2, 4)).sum().backward()
        before_clamp, version = _step_reading(*refs, torch.Tensor), last._version
        with torch.no_grad():
            last.clamp_(-10, 10)
        assert last._version > version
        assert (_step_reading(*refs, torch.Tensor) == before_clamp) == (i > 0)
        step()
        readings.append(_step_reading(*refs, torch.Tensor))
        opt.zero_grad()
    assert all(isinstance(r, tuple) for r in readings) and len(set(readings)) == 3
    ids = [[item[0] for item in r if isinstance(item, tuple)] for r in readings]
    assert ids[0] and ids[0] == ids[1] == ids[2]


# -- Dynamo: recompile reasons, graph breaks, compile metrics, the recompile limit ---------------

def test_dynamo_records_parse_into_cagtool_events(tmp_path):
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.record.writer import RecordWriter

    manifest = ModeManifest(mode="aot", argv=[], target={}, cwd=str(tmp_path), versions={}, backend="eager", dynamic=False, started_at="")
    writer = RecordWriter(tmp_path / "aot", manifest)
    handler = StructuredLogHandler(writer, StepTracker(writer, "aot"))

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = x + 1
        print("", end="")  # a graph break: Dynamo cannot trace print
        return x * 2

    compiled = torch.compile(f, backend="eager")
    logger = logging.getLogger(TRACE_LOGGER)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        with torch._dynamo.config.patch(recompile_limit=2):
            for n in (1, 2, 3):
                compiled(torch.ones(3), n)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        writer.close()
    assert handler.errors == 0, handler.last_error
    record = load_mode(tmp_path / "aot")

    recompiles = record.of(DynamoRecompileEvent)
    # The first recompile's reason arrives as a plain string, later ones as a JSON list.
    assert [r.compile_id for r in recompiles] == ["0/1", "0/2"]
    assert recompiles[0].reasons[0].startswith("0/0: n == 1")
    assert any(reason.startswith("0/1: n == 2") for reason in recompiles[1].reasons)

    breaks = record.of(GraphBreakEvent)
    assert breaks and breaks[0].file == __file__ and breaks[0].code.startswith("print(")

    compiles = record.of(DynamoCompileEvent)
    assert [c.compile_id for c in compiles][:2] == ["0/0", "1/0"]  # frame 1: the code after the break
    failed = [c for c in compiles if c.fail_type]
    assert failed and failed[-1].compile_id == "0/2"
    hits = limit_hits(record, compiles)
    assert [(h.limit_type, h.limit_value) for h in hits] == [("recompile_limit", 2)]


def _unique_graphs(run: Callable[[], None]) -> int:
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    run()
    return counters["stats"]["unique_graphs"]


def test_dynamic_true_keeps_a_size_equal_to_a_parameters_static_and_maybe_mark_dynamic_does_not():
    """torch.compile(dynamic=True): a first batch of 16 rows beside Linear(16, ...) is compiled
    static (duck sizing), so batch 12 recompiles; maybe_mark_dynamic on the batch keeps one graph
    (explain's fix for a size a dynamic frame kept static, docs/torch-internals.md)."""
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def batches(mark: bool) -> Callable[[], None]:
        def run() -> None:
            compiled = torch.compile(model, backend="eager", dynamic=True)
            for rows in (16, 12, 9):
                x = torch.randn(rows, 16)
                if mark:
                    torch._dynamo.maybe_mark_dynamic(x, 0)
                compiled(x)
        return run

    assert _unique_graphs(batches(False)) == 2 and _unique_graphs(batches(True)) == 1


def test_a_float_learning_rate_an_lr_scheduler_changes_recompiles_a_compiled_step_and_a_tensor_rate_does_not():
    """The compiled-optimizer recipe: a float lr that LambdaLR changes recompiles step() once
    (guard `param_groups[0]['lr'] == 0.01`), a tensor lr never (explain's fix for that guard)."""

    def schedule(lr: Any) -> Callable[[], None]:
        def run() -> None:
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.Adam(model.parameters(), lr=lr)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9**s)
            step = torch.compile(opt.step, backend="eager")
            for _ in range(3):
                model(torch.randn(2, 4)).sum().backward()
                step()
                sched.step()
        return run

    assert _unique_graphs(schedule(0.01)) == _unique_graphs(schedule(torch.tensor(0.01))) + 1


def test_a_first_batch_of_one_stays_specialised_under_dynamic_true_until_backed_size_oblivious():
    """torch.compile(dynamic=True) with a first batch of 1 row: 0/1 specialisation compiles it
    static, so 8 rows recompile; torch.fx.experimental._config.backed_size_oblivious keeps one
    graph (explain's fix for a size of 0 or 1 a dynamic frame kept static)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

    def run() -> None:
        compiled = torch.compile(model, backend="eager", dynamic=True)
        for rows in (1, 8, 5):
            compiled(torch.randn(rows, 8))

    assert _unique_graphs(run) == 2
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        assert _unique_graphs(run) == 1


def test_a_length_of_one_marked_dynamic_still_recompiles_at_two_until_backed_size_oblivious():
    """A generation loop from a length of 1 (grad off): maybe_mark_dynamic on the length, as
    TORCH_COMPILE_DYNAMIC_SOURCES does, leaves the recompile at length 2 (0/1 specialisation);
    with backed_size_oblivious the marked length compiles once for every length (explain's fix for
    a size guard whose first size was 0 or 1)."""
    head = torch.nn.Linear(4, 7)

    def run() -> None:
        compiled = torch.compile(lambda ids: head(ids.float().unsqueeze(-1).expand(*ids.shape, 4)), backend="eager")
        with torch.no_grad():
            ids = torch.zeros(1, 1, dtype=torch.long)
            for _ in range(4):
                torch._dynamo.maybe_mark_dynamic(ids, 1)
                ids = torch.cat([ids, compiled(ids)[:, -1].argmax(-1, keepdim=True)], 1)

    assert _unique_graphs(run) == 2
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):
        assert _unique_graphs(run) == 1


def test_a_last_batch_of_one_recompiles_a_marked_dimension_on_a_guard_of_two_and_mark_unbacked_does_not():
    """A DataLoader's last batch of 1 row, the batch marked dynamic (explain's usual fix for a
    smaller last batch): 0/1 specialisation keeps a size of 1 out of the dynamic graph, so it
    recompiles, failing `2 <= x.size()[0]` (torch_text.specialised_size reads that guard as a size);
    dynamic=True the same; mark_unbacked, torch's hint in the guard's comment, compiles one graph
    for the frame it marks."""
    from torch._dynamo.utils import counters

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))

    def run(mark, **options) -> None:
        compiled = torch.compile(model, backend="eager", **options)
        for rows in (4, 4, 1):
            x = torch.randn(rows, 8)
            if mark is not None:
                mark(x, 0)
            compiled(x)

    failures: list[str] = []
    import logging

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append(record.getMessage())

    keep = Keep()
    torch._logging.set_logs(recompiles=True)
    logging.getLogger("torch._dynamo.guards").addHandler(keep)
    try:
        assert _unique_graphs(lambda: run(torch._dynamo.maybe_mark_dynamic)) == 2
    finally:
        logging.getLogger("torch._dynamo.guards").removeHandler(keep)
        torch._logging.set_logs()
    said = "\n".join(failures)
    assert "0/1 specialization" in said and "mark_unbacked" in said, said[-2000:]
    from cagtool.report.recompiles.table import guard_text
    from cagtool.torch_text import specialised_size

    (line,) = [line.split(": ", 1)[1] for line in said.splitlines() if line.strip().startswith("- 0/0: ")]
    assert specialised_size(guard_text(line)) == ("args[0]", 0), line
    assert _unique_graphs(lambda: run(None, dynamic=True)) == 2
    assert _unique_graphs(lambda: run(torch._dynamo.decorators.mark_unbacked)) == 1
    assert counters["frames"]["total"] >= 1


def test_a_length_recompiled_dynamic_takes_every_later_length_but_one():
    """Automatic dynamic shapes: the recompile on a changed length compiles it dynamic, and later
    lengths reuse that graph; a length of 1 is specialised, so it recompiles once more (explain's
    words on a size recompile at a run's end whose guard tree shows the length dynamic)."""
    head = torch.nn.Linear(4, 7)
    compiled = torch.compile(lambda ids: head(ids.float().unsqueeze(-1).expand(*ids.shape, 4)), backend="eager")

    def lengths(*seen: int) -> Callable[[], None]:
        def run() -> None:
            for length in seen:
                compiled(torch.zeros(4, length, dtype=torch.long))
        return run

    assert _unique_graphs(lengths(8, 12, 16, 20, 5)) == 2
    assert _unique_graphs(lengths(8, 12, 16, 1)) == 3


def test_layers_skipped_on_random_draws_are_a_graph_per_set_and_a_tensor_draw_with_where_is_one():
    """LayerDrop under compiled autograd: a block skipped where random.random() says so makes a
    backward graph per set of blocks that ran (Dynamo does not trace random.random(): a graph break
    torch names `Random.random`); picking the block's input or output with torch.where on a tensor
    draw keeps one graph (explain's fix for a structure change beside a random draw)."""
    import random

    blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(x: torch.Tensor, skip: list[bool], where: bool) -> torch.Tensor:
        for block, skipped in zip(blocks, skip):
            if where:
                x = torch.where(torch.tensor(skipped), x, torch.relu(block(x)))
            elif not skipped:
                x = torch.relu(block(x))
        return x

    draws = [[False, False, False], [True, False, False], [False, True, True], [True, False, False]]

    def steps(where: bool) -> list[Callable[[], None]]:
        return [lambda skip=skip: forward(torch.ones(2, 4), skip, where).sum().backward() for skip in draws]

    assert len(run_under_ca(*steps(where=False)).graphs) == 3  # three sets of blocks ran
    assert len(run_under_ca(*steps(where=True)).graphs) == 1
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns it cannot trace the builtin
        torch.compile(lambda x: x * 2 if random.random() < 0.5 else x, backend="eager")(torch.ones(2))
    if torch.__version__ >= "2.14":
        # torch 2.14 and 2.15 trace the draw: no break on it (the branch on it is logged as
        # "Data-dependent branching" at its line, which cagtool reads with the line's code,
        # torch_text.random_draw_in_code; tests/report/recompiles/test_ordinary_scripts.py).
        assert not counters["graph_break"]
        return
    [reason] = counters["graph_break"]
    assert random_module_call(reason) == "Random.random"


def test_a_guard_on_a_python_number_checks_its_type_and_an_attribute_set_before_the_first_call_is_not_a_recompile():
    """Two facts explain's words on a Python value rest on. A rate written `0` (an int), then
    `0.0` (a float), recompiles the compiled step although the two are equal: torch's guard on a
    constant (EQUALS_MATCH) checks the type too; written `0.0` from the start, it does not. And an
    attribute the forward sets on its first call while it is None (`config.problem_type`)
    recompiles the forward once; set before the first call, never."""

    def rates(first: float) -> Callable[[], None]:
        def run() -> None:
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            step = torch.compile(opt.step, backend="eager")
            for rate in (first, 0.0):
                opt.param_groups[0]["lr"] = rate
                model(torch.randn(2, 4)).sum().backward()
                step()
        return run

    assert _unique_graphs(rates(0)) == _unique_graphs(rates(0.0)) + 1

    class Config:
        problem_type: str | None = None

    class Classifier(torch.nn.Module):
        def __init__(self, problem_type: str | None) -> None:
            super().__init__()
            self.config, self.body = Config(), torch.nn.Linear(4, 2)
            self.config.problem_type = problem_type

        def forward(self, x):
            if self.config.problem_type is None:
                self.config.problem_type = "single_label_classification"
            return self.body(x)

    def calls(problem_type: str | None) -> Callable[[], None]:
        def run() -> None:
            compiled = torch.compile(Classifier(problem_type), backend="eager")
            for _ in range(3):
                compiled(torch.randn(2, 4))
        return run

    assert _unique_graphs(calls(None)) == 2 and _unique_graphs(calls("single_label_classification")) == 1


def test_work_outside_the_scripts_modes_reaches_none_and_restores_them():
    """capture/outside_modes.py: cagtool's ops reach neither kind of mode the script entered, and
    both stacks are as they were after (docs/torch-internals.md, "The script's modes")."""
    from torch.overrides import BaseTorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from cagtool.capture.outside_modes import outside_user_modes

    seen: list[str] = []

    class Functions(BaseTorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(f"function:{getattr(func, '__name__', func)}")
            return super().__torch_function__(func, types, args, kwargs or {})

    class Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(f"dispatch:{func.__name__}")
            return func(*args, **(kwargs or {}))

    def work() -> float:
        assert torch.arange(2).device == x.device
        return (x * 2).sum().item()

    x = torch.ones(3)
    assert outside_user_modes(work) == 6.0  # no mode entered: nothing to take off
    outer, inner, dispatch = Functions(), Functions(), Dispatch()
    with outer, inner, dispatch:
        lengths = outside_user_modes(lambda: (work(), torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()))
        assert lengths == (6.0, 0, 0)
        assert seen == []
        assert torch._C._len_torch_function_stack() == 2 and torch._C._len_torch_dispatch_stack() == 1
        assert torch.overrides._get_current_function_mode() is inner
        (x + 1).sum()
    assert "dispatch:add.Tensor" in seen and "function:add" in seen


def _clip(grad: torch.Tensor) -> torch.Tensor:
    return grad.clamp(-1.0, 1.0)


def _on_module(module: Any, grad_in: Any, grad_out: Any) -> None:
    return None


def test_a_ca_graph_reads_each_hook_from_hooks_i_and_its_first_call_is_handed_the_hook_objects():
    """What capture/observe/hook_sites.py relies on: each `call_hook` node's hook is
    `getitem(hooks, i)`, and runtime_wrapper calls the compiled graph with
    (inputs, sizes, scalars, hooks, packed_inputs), hooks[i] being the registered object itself; a
    module's full backward hook is torch's own hook holding a BackwardHook (user_hooks), and under
    a compiled forward Dynamo's partial(trace_wrapped, bw_state=...) naming the user's hooks."""
    from cagtool.capture.observe.hook_sites import hook_sites

    calls: list[tuple[Any, ...]] = []
    slots: list[list[tuple[str, int]]] = []

    def compiler(gm: Any) -> Any:
        slots.append(graph_dump.summarize_graph(gm).hook_slots)
        compiled = torch.compile(gm, backend="eager")

        def first_call(*args: Any) -> Any:
            calls.append(args)
            return compiled(*args)

        return first_call

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    model[0].weight.register_hook(_clip)
    decay = lambda p: None  # noqa: E731
    model[2].weight.register_post_accumulate_grad_hook(decay)
    model[2].register_full_backward_hook(_on_module)
    compiled_model = torch.compile(model, backend="eager")
    try:
        with ca._enable(compiler, dynamic=False):
            model(torch.randn(2, 4)).sum().backward()  # eager forward: torch's BackwardHook
            with torch._dynamo.config.patch(compiled_autograd=True):
                compiled_model(torch.randn(2, 4)).sum().backward()  # compiled forward: Dynamo's BackwardState
    finally:
        torch._dynamo.reset()
    assert len(calls) == len(slots) == 2
    for args, graph_slots in zip(calls, slots):
        hooks = args[3]
        assert isinstance(hooks, (tuple, list)) and graph_slots
        assert hooks[dict((t, i) for t, i in graph_slots)["tensor_pre_hook"]] is _clip
        assert hooks[dict((t, i) for t, i in graph_slots)["post_acc_grad_hook"]] is decay
        named = {(s.hook_type, s.function, s.line, s.module) for s in hook_sites(hooks, graph_slots)}
        assert ("tensor_pre_hook", "_clip", _clip.__code__.co_firstlineno, "") in named
        assert ("post_acc_grad_hook", decay.__qualname__, decay.__code__.co_firstlineno, "") in named
        assert ("post_hook", "_on_module", _on_module.__code__.co_firstlineno, "Linear") in named, named
        assert not any("hooks.py" in s.file or "trace_wrapped" in s.function for s in hook_sites(hooks, graph_slots))


def test_the_hooks_are_shown_in_nested_disabled_calls_and_hidden_again_after():
    """`_hidden_while_compiled` on torch's own hook dict: a compiled call hides cagtool's hook, a
    disabled function called inside shows it, one called inside that (this thread's, no region of
    its own) shows it too, and the hook is hidden again when they return; a disabled call on
    another thread while the compiled call is innermost shows it there and hides it after."""
    import threading

    from torch.optim.optimizer import _global_optimizer_pre_hooks, register_optimizer_step_pre_hook

    from cagtool.capture.steps.hooks import _hidden_while_compiled

    handle = register_optimizer_step_pre_hook(lambda o, a, k: None)
    try:
        hidden, shown_in, inside = _hidden_while_compiled([(_global_optimizer_pre_hooks, handle.id)], [True])
        seen: list[tuple[str, bool]] = []
        inside_seen: list[tuple[str, bool]] = []

        def inner_fn() -> None:
            seen.append(("inner", handle.id in _global_optimizer_pre_hooks))
            inside_seen.append((threading.current_thread().name, inside()))

        inner = shown_in(torch._dynamo.disable(inner_fn))

        def outer_fn() -> None:
            seen.append(("outer", handle.id in _global_optimizer_pre_hooks))
            inner()
            seen.append(("outer after inner", handle.id in _global_optimizer_pre_hooks))

        outer = shown_in(torch._dynamo.disable(outer_fn))
        assert not inside()
        shown = hidden()  # a compiled call begins
        seen.append(("compiled", handle.id in _global_optimizer_pre_hooks))
        outer()
        seen.append(("compiled after", handle.id in _global_optimizer_pre_hooks))
        thread = threading.Thread(target=inner, name="other")
        thread.start()
        thread.join()
        seen.append(("after the thread's", handle.id in _global_optimizer_pre_hooks))
        shown()  # it returns
        seen.append(("returned", handle.id in _global_optimizer_pre_hooks))
        assert seen == [("compiled", False), ("outer", True), ("inner", True), ("outer after inner", True),
                        ("compiled after", False), ("inner", True), ("after the thread's", False), ("returned", True)]
        # `inside`: this thread's compiled call is in progress, also under a disabled call in it;
        # another thread's disabled call is not inside a compiled call of its own; none after it returns.
        assert inside_seen == [(threading.current_thread().name, True), ("other", False)]
        assert not inside()
    finally:
        handle.remove()


def test_a_custom_function_compiled_without_aot_is_another_class_at_every_call_and_each_backward_a_capture():
    """A custom autograd.Function (a gradient reversal layer) in code compiled with backend="eager"
    runs through torch's autograd_function_apply, which defines its Function class, ApplyTemplate,
    at every call: compiled autograd keys its cache on the class, so each backward is captured anew,
    and Dynamo's compile of the graph's code fails its guard on the class
    (`___check_type_id(backward_c_function, ...)`, which torch_text.backward_function_class reads).
    With aot_eager, or the `.apply` left out of the compiled code by torch.compiler.disable, the
    captures stop; a Function class defined in the function called every step is the same story
    without torch.compile (explain's words and fixes for a new node of the same graph)."""
    from torch._dynamo.utils import _compilation_metrics

    class GradReverse(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.weight = weight
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output.neg() * ctx.weight, None

    layer = torch.nn.Linear(4, 4)

    def through(x, weight):
        return GradReverse.apply(layer(x), weight)

    @torch.compiler.disable
    def reverse_eagerly(x, weight):
        return GradReverse.apply(x, weight)

    def through_disabled(x, weight):
        return reverse_eagerly(layer(x), weight)

    def inner(x, weight):
        class Reverse(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output.neg() * weight

        return Reverse.apply(layer(x))

    def captures(forward: Callable[..., torch.Tensor]) -> tuple[int, set[str]]:
        classes: list[type] = []

        def step(i: int) -> Callable[[], None]:
            def run() -> None:
                out = forward(torch.ones(2, 4), 0.25 * i).sum()
                classes.append(type(out.grad_fn.next_functions[0][0]))
                out.backward()
            return run

        torch._dynamo.reset()
        graphs = len(run_under_ca(*(step(i) for i in range(4))).graphs)
        return graphs, {c.__name__ for c in classes} if len(set(classes)) == len(classes) else set()

    _compilation_metrics.clear()
    graphs, fresh = captures(torch.compile(through, backend="eager"))
    assert graphs == 4 and fresh == {"ApplyTemplateBackward"}  # a new class, of one name, at every call
    reasons = [str(m.recompile_reason) for m in _compilation_metrics if m.recompile_reason]
    assert any(backward_function_class(r) == "ApplyTemplateBackward" for r in reasons), reasons
    assert captures(torch.compile(through, backend="aot_eager"))[0] <= 2
    assert captures(torch.compile(through_disabled, backend="eager"))[0] <= 2
    assert captures(through)[0] <= 2  # the Function defined once, uncompiled
    graphs, fresh = captures(inner)
    assert graphs == 4 and fresh == {"ReverseBackward"}


def test_an_int_attribute_of_a_module_is_specialised_per_value_unless_allow_unspec_int_on_nn_module():
    """A queue pointer kept as an int attribute of a compiled module and advanced by its forward
    (MoCo's): Dynamo compiles the forward once per value (4 values of a cycling pointer: 4 graphs);
    with torch._dynamo.config.allow_unspec_int_on_nn_module it takes the int as an input after the
    first change (2 graphs), explain's fix for an int attribute of the module."""

    class Queue(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("queue", torch.zeros(4, 64))
            self.ptr = 0
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, k: torch.Tensor) -> torch.Tensor:
            n = k.shape[0]
            out = self.lin(k).sum() + self.queue.sum()
            with torch.no_grad():
                self.queue[:, self.ptr:self.ptr + n] = k.T
            self.ptr = (self.ptr + n) % 64
            return out

    def run() -> None:
        compiled = torch.compile(Queue(), backend="eager")
        for _ in range(10):
            compiled(torch.randn(16, 4)).backward()

    assert _unique_graphs(run) == 4
    with torch._dynamo.config.patch(allow_unspec_int_on_nn_module=True):
        assert _unique_graphs(run) == 2


def test_a_fullgraph_compiler_is_read_from_its_compiled_module_and_a_disabled_hook_is_an_error_in_it():
    """What the CA observer reads of the compiler a CA graph was compiled with
    (ca_observer.compiler_fullgraph: the OptimizedModule's `dynamo_ctx.fullgraph`), and why it
    matters: under compiled autograd with torch.compile(..., fullgraph=True), a hook passed through
    torch._dynamo.disable raises (explain's fix for a list-appending hook is then a tensor), and a
    hook writing into a tensor compiles once."""
    from torch._dynamo.utils import counters

    from cagtool.capture.observe.ca_observer import compiler_fullgraph

    layer = torch.nn.Linear(2, 2)
    assert compiler_fullgraph(torch.compile(backend="eager", fullgraph=True)(layer)) is True
    assert compiler_fullgraph(torch.compile(backend="eager")(layer)) is False

    def backwards(hook: Callable[[torch.Tensor], Any]) -> int:
        torch._dynamo.reset()
        counters.clear()
        model = torch.nn.Linear(4, 1)
        model.weight.register_hook(hook)
        with ca._enable(torch.compile(backend="eager", fullgraph=True), dynamic=True):
            for _ in range(3):
                model.zero_grad(set_to_none=True)
                model(torch.randn(2, 4)).sum().backward()
        return counters["stats"]["unique_graphs"]

    norms: list[float] = []
    with pytest.raises(torch._dynamo.exc.Unsupported, match="torch.compiler.disable"):
        backwards(torch._dynamo.disable(lambda g: norms.append(g.norm().item())))
    buf = torch.zeros(())

    def record_norm(g: torch.Tensor) -> None:
        buf.copy_(g.norm())

    assert backwards(record_norm) == 1 and buf.item() > 0
    torch._dynamo.reset()


def test_frames_dynamo_compiles_while_compiled_autograd_captures_inside_a_compiled_function():
    """explain.py `_inside_captures`: a backward run inside a compiled function (the tutorial's
    `torch.compile(lambda: loss.backward())` with the compiled_autograd flag) leaves Dynamo's frame
    evaluation on while compiled autograd captures. torch 2.14 then compiles frames of Python's
    inspect module that the capture calls, and recompiles them at every new capture (the graph's
    new class); 2.13 compiles none, 2.15 one (`isclass`), never again. Read from torch's own
    compilation metrics."""
    import os

    from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics

    torch._dynamo.reset()
    clear_compilation_metrics()
    x = torch.randn(4, requires_grad=True)
    with torch._dynamo.config.patch(compiled_autograd=True):
        for op in (torch.add, torch.sub, torch.mul):
            loss = op(x, x).sum()
            torch.compile(lambda: loss.backward(), backend="eager")()
    compiled = [(m.co_name, os.path.basename(m.co_filename or "")) for m in get_compilation_metrics()]
    torch._dynamo.reset()
    inspect_frames = [name for name, file in compiled if file == "inspect.py"]
    if torch.__version__.startswith("2.14."):
        assert {"_check_class", "_shadowed_dict"} <= set(inspect_frames)
        assert inspect_frames.count("_check_class") > 3  # compiled again at each of the three captures
    else:  # none recompiled (2.15 compiles `isclass` once)
        assert all(inspect_frames.count(name) == 1 for name in inspect_frames), inspect_frames
    assert ("<lambda>", "test_torch_internals.py") in compiled


def test_whether_a_graph_break_is_an_error_is_read_from_the_compile_on_the_stack():
    """compile_phase.fullgraph_now (DynamoCompileEvent.fullgraph, explain's `fullgraph` fact): inside
    a compile, Dynamo's `_compile` in torch/_dynamo/convert_frame.py is on the stack with its
    `one_graph` argument True under torch.compile(..., fullgraph=True), and
    `_get_error_on_graph_break()` is True inside torch._dynamo.error_on_graph_break(True). Read at
    the point torch hands over its compilation metrics (where cagtool's tap reads it)."""
    from torch._dynamo import convert_frame

    from cagtool.capture.observe.compile_phase import fullgraph_now

    seen: list[tuple[str, bool | None]] = []
    original = convert_frame.log_dynamo_start

    def tapped(code: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(code, *args, **kwargs)
        seen.append((code.co_name, fullgraph_now()))
        return result

    def whole(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def broken(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def strict(x: torch.Tensor) -> torch.Tensor:
        return x - 1

    torch._dynamo.reset()
    convert_frame.log_dynamo_start = tapped
    try:
        torch.compile(whole, fullgraph=True, backend="eager")(torch.ones(2))
        torch.compile(broken, backend="eager")(torch.ones(2))
        with torch._dynamo.error_on_graph_break(True):
            torch.compile(strict, backend="eager")(torch.ones(2))
    finally:
        convert_frame.log_dynamo_start = original
        torch._dynamo.reset()
    assert seen == [("whole", True), ("broken", False), ("strict", True)]
    assert fullgraph_now() is None  # outside a compile: not known


_OPTIMIZER_IN_BACKWARD = """
import torch
from torch._dynamo import compiled_autograd

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}


def by_dict(p):
    optimizers[p].step()
    optimizers[p].zero_grad()


def by_attr(p):
    p.optimizer.step()
    p.optimizer.zero_grad()


for p in model.parameters():
    p.optimizer = optimizers[p]
    p.register_post_accumulate_grad_hook(by_dict if LOOKUP == "dict" else by_attr)
start = [p.detach().clone() for p in model.parameters()]
for _ in range(2):
    loss = model(torch.randn(3, 4)).pow(2).mean()
    if CA:
        with compiled_autograd._enable(torch.compile(backend="aot_eager")):
            loss.backward()
    else:
        loss.backward()
MOVED = [bool((p != s).any()) for p, s in zip(model.parameters(), start)]
"""


def test_under_compiled_autograd_an_optimizer_looked_up_by_parameter_in_a_hook_steps_one_parameter_only():
    """pytorch/tutorials' optimizer-in-backward recipe: one optimizer per parameter in a module-level
    dict keyed by the parameter, `optimizers[p].step()` in a module-level post-accumulate-grad hook.
    Eager and plain torch.compile step every parameter; under compiled autograd (torch 2.13) the
    hooks run inside the compiled backward graph and only the last parameter's optimizer steps: the
    others keep their initial values and their gradients, silently (docs/torch-internals.md). The
    optimizer found as an attribute of the parameter steps every one; so does the same dict read as
    a closure's (a hook defined in a function). The code runs as a script's module does: its own
    globals."""

    # In a process of its own: the recipe leaves optimizers alive in this one (each a parameter's
    # attribute, its hooks held by torch), and a capture later in the same process would wait for
    # them to step (tests/test_grad_digest.py's backward-only job).
    runner = textwrap.dedent("""
        import json, sys, types
        import torch
        text = sys.stdin.read()
        moved = {}
        for lookup, ca in (("dict", False), ("attr", True), ("dict", True)):
            torch._dynamo.reset()
            module = types.ModuleType("cagtool_pin_optimizer_in_backward")
            module.__dict__.update(LOOKUP=lookup, CA=ca)
            sys.modules[module.__name__] = module  # Dynamo reads a frame's globals through its module
            exec(compile(text, "optimizer_in_backward.py", "exec"), module.__dict__)
            del sys.modules[module.__name__]
            moved[f"{lookup} {ca}"] = module.MOVED
        print(json.dumps(moved))
    """)
    proc = subprocess.run([sys.executable, "-c", runner], input=_OPTIMIZER_IN_BACKWARD, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])

    def moved(lookup: str, ca: bool) -> list[bool]:
        return found[f"{lookup} {ca}"]

    assert moved("dict", ca=False) == [True, True, True, True]
    assert moved("attr", ca=True) == [True, True, True, True]
    assert moved("dict", ca=True) == [False, False, False, True]


def test_a_ca_graph_keeps_the_sizes_its_nodes_read_numbered_anew_in_their_order():
    """docs/torch-internals.md, "A CA graph's sizes, numbered anew": `end_capture` calls
    `remove_unused_sizes`, which returns the capture's indices of the sizes some node reads; the
    graph's code reads them as sizes[0..n-1] and the runtime hands it those sizes in the capture's
    order, so the code's sizes[k] is the capture's sizes[sorted(used)[k]]. The padded text
    classifier (tests/scripts/padded_sequences.py): its third capture holds 4 sizes dynamic and
    reads 2, the two a miss for the third length did not change."""
    cls = ca.AutogradCompilerInstance
    original_begin, original_unused = cls.begin_capture, cls.remove_unused_sizes
    held: list[int] = []
    used: list[set[int]] = []
    graphs: list[Any] = []

    def begin_capture(inst, inputs, sizes, *args, **kwargs):
        held.append(len(sizes))
        return original_begin(inst, inputs, sizes, *args, **kwargs)

    def remove_unused_sizes(inst, *args, **kwargs):
        kept = original_unused(inst, *args, **kwargs)
        used.append(set(kept))
        return kept

    def compiler(gm: Any) -> Any:
        graphs.append(gm)
        return gm

    torch.manual_seed(0)
    emb, proj, out = torch.nn.Embedding(100, 16, padding_idx=0), torch.nn.Linear(16, 16), torch.nn.Linear(16, 2)

    def forward(tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(proj(emb(tokens)))
        return out((h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))

    compiled = torch.compile(forward, backend="aot_eager")
    cls.begin_capture, cls.remove_unused_sizes = begin_capture, remove_unused_sizes
    try:
        with ca._enable(compiler, dynamic=False):
            for longest in (7, 12, 9):
                tokens = torch.randint(1, 100, (4, longest))
                tokens[1:, -1] = 0
                loss = compiled(tokens, (tokens != 0).float()).sum()
                loss.backward()
    finally:
        cls.begin_capture, cls.remove_unused_sizes = original_begin, original_unused
        torch._dynamo.reset()
    assert len(used) == len(graphs) == len(held) == 3, (used, held)
    for kept, gm in zip(used, graphs):
        reads = sorted({n.args[1] for n in gm.graph.nodes if n.target is operator.getitem and n.args[0].name == "sizes"})
        assert reads == list(range(len(kept))), (reads, kept)  # numbered anew, 0..n-1
    assert held[2] > len(used[2]) > 0, (held, used)  # sizes held dynamic that no node reads
    source = textwrap.dedent(inspect.getsource(cls.end_capture))
    assert "for idx, integer in enumerate(sizes):" in source and "if idx in used_sizes_idx:" in source  # kept in the capture's order


_FLAG_AFTER_COMPILE = """
import json, torch
from torch._dynamo.utils import counters
model = torch.nn.Linear(4, 4)
def step(x):
    model(x).sum().backward()
made_before = torch.compile(step, backend="eager")
torch._dynamo.config.compiled_autograd = True
for _ in range(3):
    made_before(torch.randn(2, 4))
before = dict(counters.get("compiled_autograd", {}))
made_after = torch.compile(step, backend="eager")
for _ in range(3):
    made_after(torch.randn(2, 4))
print(json.dumps([before, dict(counters.get("compiled_autograd", {}))]))
"""


def test_the_ca_flag_is_read_when_torch_compile_is_called_not_when_its_function_runs():
    """torch 2.13 reads torch._dynamo.config.compiled_autograd in OptimizeContext.__init__ (the call
    of torch.compile): a function compiled before the flag was set runs its backward with no
    compiled autograd, one compiled after it turns it on around each call. The CA-flag finding
    (capture/steps/findings.py, check_flag) tells the two apart by this."""
    proc = subprocess.run([sys.executable, "-c", _FLAG_AFTER_COMPILE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    before, after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == {} and after.get("captures", 0) >= 1


def test_share_memory_marks_cpu_parameters_shared_and_a_forked_worker_writes_them():
    """What FinalStateEvent.params_shared reads (docs/torch-internals.md, Hogwild): a CPU parameter
    is shared after share_memory(), not before, and a forked worker's in-place update is what the
    parent then reads."""
    import multiprocessing as mp

    import torch

    model = torch.nn.Linear(3, 2)
    assert not any(p.is_shared() for p in model.parameters())
    model.share_memory()
    assert all(p.is_shared() for p in model.parameters())

    def step(m):
        with torch.no_grad():
            m.weight.add_(1.0)

    before = model.weight.detach().clone()
    worker = mp.get_context("fork").Process(target=step, args=(model,))
    worker.start()
    worker.join(60)
    assert worker.exitcode == 0
    assert torch.equal(model.weight.detach(), before + 1.0)


def test_a_compiled_non_reentrant_checkpoint_on_the_eager_backend_moves_the_generator_in_its_backward():
    """docs/torch-internals.md (a non-reentrant checkpoint ...): eager's checkpoint leaves the global
    generator where the forward left it; compiled with backend="eager" the recompute in the
    backward draws from it; with aot_eager it does not. What makes an accumulating job's second
    micro-batch draw other dropout masks than eager's (compare's first_backward_agrees)."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)

    def block(x):
        return torch.nn.functional.dropout(lin(x), 0.5, training=True)

    def forward(x):
        return checkpoint(block, x, use_reentrant=False).sum()

    moved = {}
    try:
        for backend in (None, "eager", "aot_eager"):
            f = forward if backend is None else torch.compile(forward, backend=backend)
            torch.manual_seed(5)
            loss = f(torch.ones(4, 8))
            before = torch.get_rng_state()
            loss.backward()
            moved[backend] = not torch.equal(before, torch.get_rng_state())
            torch._dynamo.reset()
    finally:
        torch._dynamo.reset()
    assert moved == {None: False, "eager": True, "aot_eager": False}


def test_inductor_keeps_its_precompiled_headers_where_cagtool_looks_and_builds_them_by_default():
    """docs/torch-internals.md, "Inductor's precompiled headers": torch's directory for them is not
    under TORCHINDUCTOR_CACHE_DIR, and its switch is on unless the environment says otherwise."""
    from torch._inductor import codecache, config as inductor_config

    from cagtool.capture.run.inductor_machine import HEADER_SUFFIXES, headers_dir

    assert headers_dir() == codecache._HEADER_DIR
    assert "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS" in inspect.getsource(inductor_config)
    out = subprocess.run([sys.executable, "-c", "from torch._inductor import config; print(config.cpp_cache_precompile_headers)"],
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"})
    assert out.stdout.strip() == "True", out.stderr[-2000:]
    from torch._inductor import cpp_builder

    assert 'extension = ".pch" if _IS_WINDOWS or not is_gcc() else ".gch"' in inspect.getsource(cpp_builder)
    assert set(HEADER_SUFFIXES) == {".gch", ".pch"}


_ISA_CHECKS_ONLY = "from torch._inductor import cpu_vec_isa; print(len(cpu_vec_isa.valid_vec_isa_list()))"
_ONE_KERNEL = "import torch; print(torch.compile(lambda x: (x.sin() + 1).relu())(torch.ones(8)).sum().item())"


def test_inductor_compiles_its_isa_checks_into_its_cache_and_skips_each_one_it_finds_there(tmp_path):
    """docs/torch-internals.md, "Inductor's ISA checks": they go into TORCHINDUCTOR_CACHE_DIR as
    `<2 chars>/<key>.cpp` defining a `..._chk_kernel` and its `.so`, keyed by their content, so a
    fresh cache holding copies of them (inductor_machine.seed_isa_checks) compiles none of them
    again, and a real compile there asks for no other."""
    from torch._inductor import cpu_vec_isa

    from cagtool.capture.run.inductor_machine import isa_checks, seed_isa_checks

    assert "if not os.path.isfile(output_path):" in inspect.getsource(cpu_vec_isa.VecISA.check_build)
    first, second = tmp_path / "first", tmp_path / "second"
    checked = subprocess.run([sys.executable, "-c", _ISA_CHECKS_ONLY], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(first)})
    assert checked.returncode == 0, checked.stderr[-2000:]
    checks = isa_checks(str(first))
    assert checks and all((first / c.source).read_text().count("_chk_kernel") for c in checks), sorted(first.rglob("*"))
    assert seed_isa_checks(checks, str(second)) == len(checks)
    libraries = [c.library for c in checks]
    for library in libraries:
        os.utime(second / library, (0, 0))
    compiled = subprocess.run([sys.executable, "-c", _ONE_KERNEL], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(second)})
    assert compiled.returncode == 0 and compiled.stdout.strip() == str(float(torch.relu(torch.ones(8).sin() + 1).sum())), compiled.stderr[-2000:]
    assert sorted(isa_checks(str(second))) == sorted(checks)
    assert [os.stat(second / library).st_mtime for library in libraries] == [0] * len(checks)
    assert any(second.rglob("*.main.so")) or any(second.rglob("*.py")), sorted(second.rglob("*"))  # the kernel was compiled there


_DYNAMO_SWITCHES = """
import torch
from torch._dynamo.utils import counters
m = torch.nn.Linear(2, 2)
torch.compile(m, backend="eager")(torch.randn(1, 2)).sum().backward()
print(torch._dynamo.config.disable, counters["frames"]["total"])
"""


@pytest.mark.parametrize("switch, disable", [("TORCHDYNAMO_DISABLE", "False"), ("TORCH_COMPILE_DISABLE", "True")])
def test_either_switch_in_the_environment_turns_dynamo_off_and_only_one_sets_its_config(switch, disable):
    """docs/torch-internals.md, "Dynamo switched off" (compile_calls._disabled_by): TORCHDYNAMO_DISABLE=1
    is read by torch._dynamo.optimize at each torch.compile call and leaves config.disable False;
    TORCH_COMPILE_DISABLE=1 sets config.disable at import. Either way nothing compiles."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHDYNAMO_DISABLE", "TORCH_COMPILE_DISABLE")}
    proc = subprocess.run([sys.executable, "-c", _DYNAMO_SWITCHES], capture_output=True, text=True, timeout=300, env={**env, switch: "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [disable, "0"]


_COMPILE_WITH_DYNAMO_OFF = """
import torch
from torch._dynamo.eval_frame import OptimizedModule
m = torch.nn.Linear(2, 2)
wrapped = torch.compiler.disable(m)
wrapped(torch.randn(1, 2))
frames = torch._dynamo.utils.counters["frames"]["total"]
print(torch.compile(m) is m, type(wrapped) is OptimizedModule, wrapped._orig_mod is m, sorted(wrapped.state_dict()), frames)
"""


def test_with_dynamo_off_torch_compile_returns_the_module_and_compiler_disable_wraps_it_as_compile_does():
    """The eager mode's torch.compile (mode_setup._compile_keeps_its_wrapper): under
    TORCHDYNAMO_DISABLE=1 torch.compile(module) is the module itself; torch.compiler.disable(module)
    is the OptimizedModule torch.compile returns with Dynamo on (`_orig_mod`, `_orig_mod.` keys),
    and calling it compiles nothing."""
    env = {**os.environ, "TORCHDYNAMO_DISABLE": "1"}
    proc = subprocess.run([sys.executable, "-c", _COMPILE_WITH_DYNAMO_OFF], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True True True ['_orig_mod.bias', '_orig_mod.weight'] 0"


@pytest.mark.parametrize("how", ["plain", "marked", "dynamic"])
def test_a_compiled_method_called_on_an_instance_with_other_parameter_sizes_recompiles_whatever_its_input(how):
    """explain.py's `other_instance`: a module class's `@torch.compile def forward`, called on a
    second instance whose weight has other sizes, compiles again with its input's changed dim
    marked dynamic and with dynamic=True (parameters' sizes are static by default,
    force_parameter_static_shapes); the guard tree holds `self`'s parameters with their sizes,
    which torch_text.wrapped_module(tree, "self") reads."""
    from torch._dynamo.utils import counters

    from cagtool.torch_text import wrapped_module

    assert torch._dynamo.config.force_parameter_static_shapes
    trees: list[str] = []

    class Layer(torch.nn.Linear):
        @torch.compile(backend="eager", dynamic=True if how == "dynamic" else None)
        def forward(self, x):
            return torch.relu(torch.mm(x, self.weight.T) + self.bias)

    counters.clear()
    try:
        with structured_records() as records:
            first, second = Layer(6, 4), Layer(4, 4)
            h = first(torch.randn(3, 6)).detach()
            if how == "marked":
                torch._dynamo.maybe_mark_dynamic(h, 1)
            second(h)
        trees = [payload for meta, payload in records if "dynamo_cpp_guards_str" in meta]
        assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    finally:
        torch._dynamo.reset()
    assert [wrapped_module(tree, "self") for tree in trees] == [
        ("Layer", "bias:[4]", "weight:[4, 6]"), ("Layer", "bias:[4]", "weight:[4, 4]")]


def _autograd_node_names(root) -> list[str]:
    seen, stack, names = set(), [root], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


def test_on_cpu_a_gru_records_a_cell_per_time_step_an_lstm_one_node_and_ctc_saves_its_lengths_as_integers():
    """What explain's words for a speech model rest on (explain.py RNN_CELL_NODE, CTC_LENGTHS_NODE):
    an eager nn.GRU or nn.RNN on CPU records one AddmmBackward0 per time step (its input's matmul
    is one node for all steps), an nn.LSTM one MkldnnRnnLayerBackward0 a layer, whatever the length;
    Dynamo breaks on the module ("Attempted to wrap RNN, GRU, or LSTM"). nn.CTCLoss's node is
    CtcLossBackward0, whose lengths compiled autograd keys on (a capture per set of target lengths);
    aten::_ctc_loss.Tensor's is CtcLossBackward1, whose length tensors it lifts (one capture), with
    the same loss as nn.CTCLoss with zero_infinity and the 'mean' reduction done by hand."""
    from collections import Counter

    from cagtool.report.recompiles.explain import CTC_LENGTHS_NODE, GRU_CELL_NODES, RNN_CELL_NODE, RNN_CELL_NODES
    from cagtool.report.recompiles.table import RNN_MODULE_CALL

    def cells(module: torch.nn.Module, frames: int) -> int:
        out, _ = module(torch.randn(2, frames, 4))
        return _autograd_node_names(out.sum().grad_fn).count(RNN_CELL_NODE)

    gru, rnn, lstm = (cls(4, 4, batch_first=True) for cls in (torch.nn.GRU, torch.nn.RNN, torch.nn.LSTM))
    assert (cells(gru, 5), cells(gru, 9), cells(rnn, 5), cells(rnn, 9)) == (5, 9, 5, 9)

    def gained(module: torch.nn.Module) -> set[str]:  # the nodes 4 more time steps add: the cell's alone
        short, long = (Counter(_autograd_node_names(module(torch.randn(2, frames, 4))[0].sum().grad_fn)) for frames in (5, 9))
        return set(long - short)

    assert RNN_CELL_NODE in gained(gru) and gained(gru) <= GRU_CELL_NODES and "UnsafeSplitBackward0" in gained(gru)
    assert RNN_CELL_NODE in gained(rnn) and gained(rnn) <= RNN_CELL_NODES
    lstm_names = [_autograd_node_names(lstm(torch.randn(2, frames, 4))[0].sum().grad_fn) for frames in (5, 9)]
    assert lstm_names[0] == lstm_names[1] and "MkldnnRnnLayerBackward0" in lstm_names[0]

    class Recurrent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.GRU(4, 4, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.compile(Recurrent(), backend="eager")(torch.randn(2, 5, 4))
    # A break Dynamo cannot resume after: counted in "unimplemented", never in "graph_break".
    assert any(RNN_MODULE_CALL in reason for reason in counters["unimplemented"]), dict(counters["unimplemented"])

    linear = torch.nn.Linear(4, 5)
    ctc = torch.nn.CTCLoss(zero_infinity=True)

    def ctc_by_tensors(log_probs, targets, input_lengths, target_lengths):
        nll, _ = torch.ops.aten._ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, 0, True)
        return (torch.where(torch.isinf(nll), 0, nll) / target_lengths.clamp(min=1)).mean()

    def captures(loss_fn) -> tuple[int, list[str]]:
        torch._dynamo.reset()
        counters.clear()
        nodes = []
        for target_lengths in ([2, 3], [4, 1], [3, 3]):
            lengths = torch.tensor(target_lengths)
            targets = torch.randint(1, 5, (int(lengths.sum()),))
            log_probs = linear(torch.randn(10, 2, 4)).log_softmax(-1)
            loss = loss_fn(log_probs, targets, torch.full((2,), 10), lengths)
            assert torch.allclose(loss, ctc(log_probs, targets, torch.full((2,), 10), lengths))
            nodes = _autograd_node_names(loss.grad_fn)
            with ca._enable(torch.compile(backend="eager")):
                loss.backward()
        return counters["compiled_autograd"]["captures"], nodes

    saved_lengths, ctc_nodes = captures(ctc)
    assert saved_lengths == 3 and CTC_LENGTHS_NODE in ctc_nodes
    lifted, tensor_nodes = captures(ctc_by_tensors)
    assert lifted == 1 and "CtcLossBackward1" in tensor_nodes and CTC_LENGTHS_NODE not in tensor_nodes
