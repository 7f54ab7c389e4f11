"""The run record's format: file names, versions and the typed events of the event stream.

A *run directory* holds one `run.json` (format `cagtool-run`) and one sub-directory per mode
(`ca`, `aot`, `eager`), each a *mode record*:

    <run>/run.json                 RunMeta: argv, target, modes, machine, versions, exit code
    <run>/<mode>/manifest.json     ModeManifest: versions, backend, start/end, status, exception
    <run>/<mode>/events.jsonl      one event per line, appended and flushed as it happens
    <run>/<mode>/graphs/ca_<N>.py  readable code of compiled-autograd graph N (GraphModule.print_readable)
    <run>/<mode>/graphs/ca_<N>.json  its nodes, structured (record/graph_file.py), for diff-graphs
    <run>/<mode>/trace/            TORCH_TRACE-format log (tlparse can open it), when enabled
    <run>/<mode>/depyf/            depyf's dump, with --depyf
    <run>/<mode>/procs/<key>/      the same mode-record layout for each Python process the target
                                   started and cagtool followed: key rank<N> when its rank is known,
                                   else pid<PID>; the manifest's `process` says which it is
    <run>/<mode>/procs/<key>/signal_stacks/SIGTERM.txt  (or SIGHUP.txt) that process's threads'
                                   stacks when the signal stopped it before it closed its record

Every event line is a JSON object with `kind`, `seq` (0, 1, 2... in write order) and `t`
(seconds since the mode started, monotonic clock). Compile ids are torch's own strings: `!N` for
the compiled-autograd capture N, `!N/F/C` for Dynamo's compile of that graph, `F/C` for a forward frame.

Steps (schema 3). A step is one training iteration, numbered from FIRST_STEP (0), as a
script's `for step in range(n)` numbers it, so "at step 2" is the step the script printed as 2:
- when the script has an optimizer (a torch.optim.Optimizer was created or stepped), a step ends
  when its `step()` returns; with several optimizers (a GAN), when every optimizer the script
  holds has stepped at least once since the previous step ended, so the step count is the
  number of training iterations whatever the order of the `step()` calls (a discriminator
  stepped k times per generator step gives one step per generator step). An optimizer that is
  created but never steps keeps the step open until it is garbage-collected;
- with no optimizer, every top-level backward call (Tensor.backward, autograd.backward,
  autograd.grad) is a step, and the step events say so (`boundary == "backward"`).
Every top-level backward call is a `backward` event with its step and its index within the
step; the `step` event (written when the step ends) has the step's backward count, and `wall_s`,
the interval since the previous step ended (forward, every backward, optimizer). Every other
event's `step` is the step in progress when it happened (a forward compile belongs to the step
whose forward it is).

Older records, still read: schema 2 had the same steps numbered from 1; schema 1 records had one
step per backward, numbered from 1, and events were stamped with the step last begun (None before
the first backward). The loader renumbers both from 0 as it reads them
(`record.loader.renumber_steps_from_zero`), so readers only ever see FIRST_STEP-based numbers; a
schema 1 record keeps its "step last begun" stamping (`stamps_step_in_progress`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Callable, ClassVar, TypeVar

from cagtool.record.validate import check_types, fast_check

_C = TypeVar("_C", bound=type)
# The classes decorated by `dataclass` whose methods are not installed yet; None once the
# module's own classes have theirs (see the end of the class definitions).
_PENDING: list[type] | None = []


def dataclass(cls: _C | None = None, /, **options: Any) -> Any:
    """`@dataclasses.dataclass(frozen=True)` for the record types of this module, without its
    import-time cost (every command imports them). The standard decorator compiles six
    methods per class at import, ~1 ms a class, 16 ms of every command's start, for methods most
    commands never call: the loader builds events without `__init__`, and `cagtool runs` builds
    none. Here the fields are the standard decorator's (fields(), asdict, replace, is_dataclass,
    __match_args__, __dataclass_params__ as for a frozen dataclass), and each method --
    `__init__`, `__repr__`, `__eq__`, `__hash__`, the frozen `__setattr__`/`__delattr__`, the
    code Python 3.11's dataclasses writes -- is compiled the first time it is looked up
    (`_CompiledOnFirstUse`). tests/test_schema_dataclasses.py checks every class against the
    standard decorator's. Plain fields only: a field with other settings (init=False,
    kw_only...) or a __post_init__ is refused at import; a class that is not plain frozen
    (@dataclass, @dataclass(order=True)), or is defined after this module's own classes, gets
    the standard decorator."""
    if options != {"frozen": True} or _PENDING is None:
        return dataclasses.dataclass(cls, **options) if cls is not None else dataclasses.dataclass(**options)

    def decorate(cls: _C) -> _C:
        documented = cls.__dict__.get("__doc__") is not None
        if not documented:
            cls.__doc__ = "-"  # spares the decorator an inspect.signature: _install_methods writes the doc
        # Not frozen yet: the classes derived from this one are decorated the same way before
        # _install_methods marks them all frozen (the decorator refuses a non-frozen class
        # derived from a frozen one).
        cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
        if not documented:
            cls.__doc__ = None
        _PENDING.append(cls)  # type: ignore[union-attr]
        return cls

    return decorate(cls) if cls is not None else decorate


RUN_FORMAT = "cagtool-run"
MODE_FORMAT = "cagtool-mode-record"
# Bump when a reader of the old version would misread the new one. Additive fields don't bump it.
# 2: steps are optimizer steps with `backward` events; a step's events carry the step in progress.
# 3: steps are numbered from 0, as the script's own loop numbers them (schemas 1 and 2: from 1).
SCHEMA_VERSION = 3
FIRST_STEP = 0  # the number of a run's first step: the one place that decides it
# Records before this version numbered steps from 1; the loader renumbers them on reading.
STEPS_FROM_ZERO_VERSION = 3
FIRST_STEP_BEFORE_SCHEMA_3 = 1
# Records from this version on stamp events with the step in progress (see the module docstring).
STEP_IN_PROGRESS_VERSION = 2


def stamps_step_in_progress(schema_version: int) -> bool:
    """Whether a record's events carry the step in progress (2+) or the step last begun (1)."""
    return schema_version >= STEP_IN_PROGRESS_VERSION


STEP_BOUNDARY_OPTIMIZER = "optimizer"  # the step ended at an optimizer's step()
STEP_BOUNDARY_BACKWARD = "backward"  # no optimizer: the step is one backward call

RUN_META_FILE = "run.json"
MANIFEST_FILE = "manifest.json"
EVENTS_FILE = "events.jsonl"
GRAPHS_DIR = "graphs"
TRACE_DIR = "trace"
DEPYF_DIR = "depyf"
PROCS_DIR = "procs"
# In a followed process's record: <SIGNAME>.txt, its threads' stacks when a stop signal killed it
# before it could close the record (capture/processes/lifeline.py, StopStacks); empty files and the
# directory are removed when the record closes.
SIGNAL_STACKS_DIR = "signal_stacks"

MODES = ("eager", "aot", "ca")
# The one mode of a record built by `cagtool import` from a TORCH_TRACE log of a job cagtool did
# not run (its manifest's `imported` says from what, and what such a record cannot hold).
IMPORTED_MODE = "imported"

# Mode status values in the manifest. "finished" covers a stop by --steps / --max-time
# (manifest.options["stopped_by"] is then "steps" or "max_time").
STATUS_RUNNING = "running"  # still running, or the process was killed before it could finish the record
STATUS_FINISHED = "finished"  # the target returned, called sys.exit(0), or a --steps/--max-time bound stopped it
STATUS_FAILED = "failed"  # the target raised or exited non-zero
STATUS_INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP (exit code 128+N), or cagtool's own process died
STATUS_KILLED = "killed"  # the process vanished without closing its record (SIGKILL, OOM killer); set by the parent or the loader
STATUS_TIMEOUT = "timeout"  # cut off by a time limit it did not choose (readers accept it; --max-time is a clean stop)

MISS_NEW_NODE = "new_node"
MISS_CHANGED_SHAPES = "changed_shapes"
MISS_UNKNOWN = "unknown"


@dataclass(frozen=True)
class SourceRef:
    """A line of the user's code. `how` says how it was found:
    `node_traceback` (the autograd node's creation traceback, exact; needs --trace-nodes),
    `compiled_frame` (the torch.compile'd function whose AOT backward the node is),
    `backward_call` (the line that called backward: the node was created in that step's forward),
    `caller` (the user's line that called the code Dynamo recompiled, e.g. `model(x)`),
    `guard` (the user frame Dynamo's guard-failure text names)."""

    file: str
    line: int
    code: str = ""
    function: str = ""
    how: str = "backward_call"


@dataclass(frozen=True)
class ChangedSize:
    """One entry of a changed-shapes miss: `sizes[index]` of the CA graph inputs."""

    index: int
    value: int | None = None  # the new value
    previous: int | None = None  # the old value, when it could be recovered
    node: str | None = None  # the autograd node owning this size
    node_call: int | None = None


@dataclass(frozen=True)
class AutogradNodeRef:
    node_call: int
    name: str


@dataclass(frozen=True)
class HookRef:
    name: str  # FX node name, e.g. call_hook
    hook_type: str  # tensor_pre_hook, pre_hook, post_hook, post_acc_grad_hook, unpack_hook...


@dataclass(frozen=True)
class Event:
    kind: ClassVar[str] = ""
    seq: int
    t: float


@dataclass(frozen=True)
class StepEvent(Event):
    """One step (see the module docstring): written when it ends, so `t` is its end."""

    kind: ClassVar[str] = "step"
    step: int
    backward_s: float  # wall time of the step's backward calls, summed
    loss: float | None = None  # the scalar its last backward was called on (None: not a scalar, or read later, see StepDeviceEvent)
    ca_captures: int = 0  # CA graphs captured during the step (cache misses)
    compiles: int = 0  # Dynamo compiles that finished during the step (forward or CA)
    compile_s: float = 0.0  # wall seconds spent in those compiles and captures
    # schema 2:
    wall_s: float | None = None  # since the previous step ended (None for the first step)
    backward_calls: int = 1
    boundary: str = ""  # STEP_BOUNDARY_OPTIMIZER | STEP_BOUNDARY_BACKWARD ("" in schema 1)
    optimizer_s: float = 0.0  # wall time in optimizer step() calls during the step


@dataclass(frozen=True)
class BackwardEvent(Event):
    """One top-level backward call (Tensor.backward, autograd.backward or autograd.grad)."""

    kind: ClassVar[str] = "backward"  # written when the call returns: `t` is its end
    step: int  # the step it belongs to
    index: int  # 0, 1, ... within the step (gradient accumulation: one per micro-batch)
    backward_s: float  # wall time of the call
    ca_captures: int = 0  # CA graphs captured during it
    call: str = "backward"  # "backward" (accumulates into .grad) or "grad" (autograd.grad)
    loss: float | None = None  # the scalar it was called on, when read without a device sync (CPU)
    thread: str = ""  # the thread's name when it is not the main thread


@dataclass(frozen=True)
class StepDeviceEvent(Event):
    """Figures of step `step` read from the device after the fact, never stalling it: `device_s`,
    the time between CUDA events recorded on the stream at the step's two boundaries (written once
    the later one has completed), and `loss`, read at the end of the run. Either may be None."""

    kind: ClassVar[str] = "step_device"
    step: int
    device_s: float | None = None
    loss: float | None = None


@dataclass(frozen=True)
class OptimizerStepEvent(Event):
    kind: ClassVar[str] = "optimizer_step"
    step: int  # the step it belongs to (schema 1: the backward it follows)
    wall_s: float
    optimizer: str = ""


@dataclass(frozen=True)
class CacheMissEvent(Event):
    """A compiled-autograd cache miss: the reason torch gave for capturing graph `ca_id`."""

    kind: ClassVar[str] = "ca_cache_miss"
    ca_id: int
    compile_id: str  # "!N"
    step: int | None
    miss_kind: str  # MISS_NEW_NODE | MISS_CHANGED_SHAPES | MISS_UNKNOWN
    message: str  # verbatim from torch
    node: str | None = None
    node_call: int | None = None
    key_size: int | None = None
    previous_key_sizes: list[int] = field(default_factory=list)
    changed_sizes: list[ChangedSize] = field(default_factory=list)
    # torch's "Cache miss due to N changed tensor shapes (total of M)": N sizes changed value and
    # became dynamic (`total_changed`), M sizes are dynamic in the graph captured (`dynamic_sizes`).
    # Records made before `dynamic_sizes` existed hold M in `total_changed`: `changed_count` reads both.
    total_changed: int | None = None
    source: SourceRef | None = None
    backward_call: SourceRef | None = None  # the user line that called the backward of that step
    inferred: bool = False  # not torch's reason: read off the diff with the previous graph (imported logs without CA verbose logging)
    dynamic_sizes: int | None = None

    @property
    def changed_count(self) -> int:
        """How many sizes changed, in torch's count (its N, never its "total of M"). A record
        without `dynamic_sizes` has torch's M in `total_changed` and every changed index listed."""
        if self.total_changed is not None and (self.dynamic_sizes is not None or self.inferred or not self.changed_sizes):
            return self.total_changed
        return len(self.changed_sizes)


@dataclass(frozen=True)
class CAGraphEvent(Event):
    """A compiled-autograd graph, captured."""

    kind: ClassVar[str] = "ca_graph"
    ca_id: int
    compile_id: str  # "!N"
    step: int | None
    node_count: int
    op_histogram: dict[str, int]
    autograd_nodes: list[AutogradNodeRef]
    aot_ids: list[int]  # AOT backward graphs inlined (nodes named aot<id>_*)
    hooks: list[HookRef]
    num_sizes: int  # dynamic sizes the graph takes
    capture_s: float
    code_file: str  # relative to the mode dir
    nodes_file: str
    compiler: str = ""  # "cagtool:<backend>" or "script" when the script's own compiler ran


@dataclass(frozen=True)
class CACompileEvent(Event):
    """The first call of compiled-autograd graph `ca_id`: compile (lazy) plus one execution."""

    kind: ClassVar[str] = "ca_compile"
    ca_id: int
    first_call_s: float
    step: int | None = None
    ok: bool = True
    error: str = ""


@dataclass(frozen=True)
class DynamoCompileEvent(Event):
    """One Dynamo compile (torch's compilation_metrics). `is_ca_graph` when it compiles a CA graph."""

    kind: ClassVar[str] = "dynamo_compile"
    compile_id: str
    is_ca_graph: bool
    step: int | None
    co_name: str = ""
    co_filename: str = ""
    co_firstlineno: int | None = None
    entire_frame_compile_time_s: float | None = None
    backend_compile_time_s: float | None = None
    inductor_compile_time_s: float | None = None
    dynamo_cumulative_compile_time_s: float | None = None
    aot_autograd_cumulative_compile_time_s: float | None = None
    inductor_cumulative_compile_time_s: float | None = None
    graph_op_count: int | None = None
    guard_count: int | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    has_guarded_code: bool | None = None


@dataclass(frozen=True)
class DynamoRecompileEvent(Event):
    """Dynamo recompiled a frame (or a CA graph) because a guard failed; reasons verbatim."""

    kind: ClassVar[str] = "dynamo_recompile"
    compile_id: str
    is_ca_graph: bool
    step: int | None
    reasons: list[str]
    # The user's line that called the recompiled code (the first frame of the user's own code on
    # the stack, or in an imported log the stack torch logged with the compile); None when unknown.
    source: SourceRef | None = None


@dataclass(frozen=True)
class GraphBreakEvent(Event):
    kind: ClassVar[str] = "graph_break"
    compile_id: str
    step: int | None
    reason: str  # the first lines of torch's message
    file: str = ""
    line: int | None = None
    code: str = ""


@dataclass(frozen=True)
class AotBackwardGraphEvent(Event):
    """AOTAutograd built a backward graph for a forward frame (counted as a backward graph in `aot`)."""

    kind: ClassVar[str] = "aot_backward_graph"
    compile_id: str
    step: int | None


@dataclass(frozen=True)
class FindingEvent(Event):
    """Something the user should know that is not an error, e.g. `ca_flag_without_compiled_backward`."""

    kind: ClassVar[str] = "finding"
    code: str
    message: str
    step: int | None = None
    source: SourceRef | None = None
    # What the finding is about, as data (e.g. process_not_followed: the argv that was started,
    # the executable, the reason).
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DDPModelEvent(Event):
    """A DistributedDataParallel model was built. `reducer`: "python" (per-parameter all-reduce in
    post-accumulate-grad hooks, what compiled autograd needs) or "cpp" (torch's C++ Reducer with
    buckets). `optimize_ddp` is the setting DDP read; `set_by` says who chose it ("cagtool" in
    ca mode, unless the script had set it to "python_reducer" itself; else "script"); `script_optimize_ddp` is what the script itself assigned, if anything."""

    kind: ClassVar[str] = "ddp_model"
    reducer: str
    optimize_ddp: str
    set_by: str
    script_optimize_ddp: str | None = None
    rank: int | None = None
    world_size: int | None = None
    num_params: int = 0  # parameters that require grad
    all_reduce_hooks: int = 0  # post-accumulate-grad hooks DDP registered (python reducer)
    bucket_cap_mb: float | None = None
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    gradient_as_bucket_view: bool | None = None
    step: int | None = None


@dataclass(frozen=True)
class FinalStateEvent(Event):
    """Numerics at the end of the run, for comparing modes."""

    kind: ClassVar[str] = "final_state"
    param_norm: float | None
    grad_norm: float | None
    num_params: int


@dataclass(frozen=True)
class GradDigestEvent(Event):
    """Per-parameter gradient digests at one step (capture/grad_digest.py), written at the end of
    the run (read back from the device then). Parallel lists, one item per parameter, named by
    module path; None where the parameter had no gradient. `reasons` says why the step was digested:
    first, recompile (a CA capture or Dynamo compile in the step), every (--parity-every),
    earlier_mode (an earlier mode of the run digested it), last (the run's last step)."""

    kind: ClassVar[str] = "grad_digest"
    step: int
    reasons: list[str]
    names: list[str]
    dtypes: list[str]
    numels: list[int]
    norm: list[float | None]  # L2 norm of the gradient
    max_abs: list[float | None]
    checksum: list[float | None]  # sum_i g_i * (1 + (i mod 1021) / 1021)


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"  # as the standard decorator's sentinel shows in signatures


_HAS_FACTORY = _Factory()


_METHODS = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__")


class _CompiledOnFirstUse:
    """A method of a record class as a descriptor that compiles it, puts it on the class in its
    own place, and returns it: the first call pays for the compile, later ones find the function."""

    def __init__(self, cls: type, name: str) -> None:
        self.cls, self.name = cls, name

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        method = _compile_method(self.cls, self.name)
        setattr(self.cls, self.name, method)
        return method.__get__(instance, owner)


def _compile_method(cls: type, name: str) -> Callable[..., Any]:
    """What `@dataclasses.dataclass(frozen=True)` (Python 3.11) compiles as `cls.<name>`."""
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {"_cls": cls, "_setattr": object.__setattr__, "_FACTORY": _HAS_FACTORY, "FrozenInstanceError": dataclasses.FrozenInstanceError}
    mine = "(" + "".join(f"self.{f.name}," for f in fields) + ")"
    names = "(" + "".join(f"{f.name!r}," for f in fields) + ")"
    if name == "__init__":
        parameters, body = [], []
        for f in fields:
            value = f.name
            if f.default is not dataclasses.MISSING:
                namespace[f"_dflt_{f.name}"] = f.default
                parameters.append(f"{f.name}=_dflt_{f.name}")
            elif f.default_factory is not dataclasses.MISSING:
                namespace[f"_dflt_{f.name}"] = f.default_factory
                parameters.append(f"{f.name}=_FACTORY")
                value = f"_dflt_{f.name}() if {f.name} is _FACTORY else {f.name}"
            else:
                parameters.append(f.name)
            body.append(f"    _setattr(self, {f.name!r}, {value})")
        lines = [f"def __init__(self, {', '.join(parameters)}):", *(body or ["    pass"])]
    elif name == "__repr__":
        shown = ", ".join(f"{f.name}={{self.{f.name}!r}}" for f in fields)
        lines = ["def __repr__(self):", f'    return self.__class__.__qualname__ + f"({shown})"']
    elif name == "__eq__":
        theirs = "(" + "".join(f"other.{f.name}," for f in fields) + ")"
        lines = ["def __eq__(self, other):", "    if other.__class__ is self.__class__:", f"        return {mine}=={theirs}", "    return NotImplemented"]
    elif name == "__hash__":
        lines = ["def __hash__(self):", f"    return hash({mine})"]
    else:
        verb = "assign to" if name == "__setattr__" else "delete"
        arguments = "name, value" if name == "__setattr__" else "name"
        lines = [
            f"def {name}(self, {arguments}):",
            f"    if type(self) is _cls or name in {names}:",
            f'        raise FrozenInstanceError(f"cannot {verb} field {{name!r}}")',
            f"    super(_cls, self).{name}({arguments})",
        ]
    exec("\n".join(lines), namespace)  # noqa: S102 - built from the class's field names
    method = namespace[name]
    method.__qualname__ = f"{cls.__qualname__}.{name}"
    if name == "__init__":
        method.__annotations__ = {**{f.name: f.type for f in fields}, "return": None}
    if name == "__repr__":
        from reprlib import recursive_repr

        method = recursive_repr("...")(method)
    return method


def _install_methods(classes: list[type]) -> None:
    """The frozen-dataclass methods of each class, as `_CompiledOnFirstUse` descriptors."""
    for cls in classes:
        fields = dataclasses.fields(cls)
        if "__post_init__" in dir(cls) or any(
            not f.init or not f.repr or not f.compare or f.hash is not None or f.kw_only is True or f.name == "self" for f in fields
        ):
            raise TypeError(f"{cls.__name__}: schema.dataclass makes plain frozen fields only; use dataclasses.dataclass for this class")
        defaulted = [f.name for f in fields if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING]
        required_after = [f.name for f in fields[len(fields) - len(defaulted) :] if f.name not in defaulted]
        if required_after:
            raise TypeError(f"non-default argument {required_after[0]!r} follows default argument")
        for name in _METHODS:
            setattr(cls, name, _CompiledOnFirstUse(cls, name))
        params = cls.__dataclass_params__  # type: ignore[attr-defined]
        params.init = params.repr = params.eq = params.frozen = True
        if cls.__doc__ is None:  # the standard decorator's: the class's name and __init__'s signature
            cls.__doc__ = cls.__name__ + _signature_text(cls, fields)


def _signature_text(cls: type, fields: tuple[dataclasses.Field, ...]) -> str:
    """str(inspect.signature(cls)) less " -> None", written from the fields when their
    annotations are strings (this module's: `from __future__ import annotations`)."""
    if not all(isinstance(f.type, str) for f in fields):
        import inspect

        return str(inspect.signature(cls)).replace(" -> None", "")
    parts = []
    for f in fields:
        text = f"{f.name}: {f.type!r}"
        if f.default is not dataclasses.MISSING:
            text += f" = {f.default!r}"
        elif f.default_factory is not dataclasses.MISSING:
            text += " = <factory>"
        parts.append(text)
    return "(" + ", ".join(parts) + ")"


# Every record type above is defined: their methods, compiled when first used. (A class
# defined below this line gets the standard decorator.)
_install_methods(_PENDING)
_PENDING = None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        StepEvent,
        BackwardEvent,
        StepDeviceEvent,
        OptimizerStepEvent,
        CacheMissEvent,
        CAGraphEvent,
        CACompileEvent,
        DynamoCompileEvent,
        DynamoRecompileEvent,
        GraphBreakEvent,
        AotBackwardGraphEvent,
        FindingEvent,
        FinalStateEvent,
        DDPModelEvent,
        GradDigestEvent,
    )
}


_NESTED: dict[str, Any] = {
    "source": SourceRef,
    "backward_call": SourceRef,
    "changed_sizes": ChangedSize,
    "autograd_nodes": AutogradNodeRef,
    "hooks": HookRef,
}


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as JSON-ready data; nested records stay dataclasses (see `json_default`).
    Shallow on purpose: dataclasses.asdict's deep copy cost tens of microseconds per step."""
    return {"kind": event.kind, **event.__dict__}


def json_default(obj: Any) -> Any:
    """json.dumps(default=...) for the nested records of an event (SourceRef, ChangedSize...)."""
    if dataclasses.is_dataclass(obj):
        return obj.__dict__
    return str(obj)


@dataclasses.dataclass(frozen=True)
class _EventShape:
    """What building one event class from a JSON object needs, computed once per class."""

    names: frozenset[str]
    allowed: frozenset[str]  # names and "kind": the keys of a line the writer wrote
    required: frozenset[str]
    defaults: dict[str, Any]
    factories: dict[str, Any]
    nested: tuple[str, ...]


def _shape(cls: type) -> _EventShape:
    fields = dataclasses.fields(cls)
    return _EventShape(
        names=frozenset(f.name for f in fields),
        allowed=frozenset(f.name for f in fields) | {"kind"},
        required=frozenset(f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING),
        defaults={f.name: f.default for f in fields if f.default is not dataclasses.MISSING},
        factories={f.name: f.default_factory for f in fields if f.default_factory is not dataclasses.MISSING},
        nested=tuple(f.name for f in fields if f.name in _NESTED),
    )


_SHAPES: dict[type, _EventShape] = {cls: _shape(cls) for cls in EVENT_TYPES.values()}


def _builder(cls: type[Event]) -> Callable[[dict[str, Any]], Event]:
    """`event_from_dict` for one class, the common case inlined: a line whose keys are the
    class's fields (no nested records) becomes the event without a per-field call, its types
    checked by `fast_check` in the same function; anything else takes `event_from_dict`."""
    shape = _SHAPES[cls]
    fast = fast_check(cls)
    if shape.nested or fast is None:
        return event_from_dict  # type: ignore[return-value]
    allowed, required, defaults, factories = shape.allowed, shape.required, shape.defaults, tuple(shape.factories.items())
    new = object.__new__

    def build(data: dict[str, Any]) -> Event:
        keys = data.keys()
        if keys <= allowed and required <= keys:
            event = new(cls)
            state = event.__dict__
            state.update(defaults)
            for key, factory in factories:
                if key not in data:
                    state[key] = factory()
            state.update(data)
            del state["kind"]
            return event if fast(event) else check_types(event)
        return event_from_dict(data)  # type: ignore[return-value]

    return build


_BUILDERS: dict[str, Callable[[dict[str, Any]], Event | None]] = {}


def event_builder(kind: Any) -> Callable[[dict[str, Any]], Event | None]:
    """A function building an event of `kind` from its decoded line (the loader's hot loop), made
    the first time the kind is seen; `event_from_dict` itself for unknown kinds."""
    build = _BUILDERS.get(kind) if isinstance(kind, str) else None
    if build is None:
        cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            return event_from_dict
        build = _BUILDERS[kind] = _builder(cls)
    return build


def event_from_dict(data: dict[str, Any]) -> Event | None:
    """The typed event, or None for an unknown kind. Unknown fields are ignored (additive changes);
    a missing required field raises TypeError, as the dataclass would."""
    cls = EVENT_TYPES.get(data.get("kind", ""))
    if cls is None:
        return None
    shape = _SHAPES[cls]
    if not shape.nested and data.keys() <= shape.allowed:
        # The common case (steps): the line's keys are the fields; no copy, no nested records.
        if not shape.required <= data.keys():
            raise TypeError(f"{cls.__name__} is missing {', '.join(sorted(shape.required - data.keys()))}")
        event = object.__new__(cls)
        state = event.__dict__
        state.update(shape.defaults)
        for key, factory in shape.factories.items():
            if key not in data:
                state[key] = factory()
        state.update(data)
        del state["kind"]
        return check_types(event)  # a field of the wrong type: TypeError, the loader says where
    values = {key: value for key, value in data.items() if key in shape.names}
    for key in shape.nested:
        value = values.get(key)
        if value is not None:
            nested = _NESTED[key]
            values[key] = [nested(**v) for v in value] if isinstance(value, list) else nested(**value)
    if not shape.required <= values.keys():
        raise TypeError(f"{cls.__name__} is missing {', '.join(sorted(shape.required - values.keys()))}")
    # What the frozen dataclass's __init__ does, without its per-field object.__setattr__: a
    # 20,000-step record builds 40,000 events, and this is 3x faster (the events are plain data).
    event = object.__new__(cls)
    state = event.__dict__
    state.update(shape.defaults)
    for key, factory in shape.factories.items():
        if key not in values:
            state[key] = factory()
    state.update(values)
    return check_types(event)
