"""The run record's format: file names, versions and the typed events of the event stream.

A *run directory* holds one `run.json` (format `cagtool-run`) and one sub-directory per mode
(`ca`, `aot`, `eager`), each a *mode record*:

    <run>/run.json                 RunMeta: argv, target, modes, machine, versions, exit code
    <run>/<mode>/manifest.json     ModeManifest: versions, backend, start/end, status, exception
    <run>/<mode>/events.jsonl      one event per line, appended and flushed as it happens
    <run>/<mode>/graphs/ca_<N>.py  readable code of compiled-autograd graph N (the code torch generated, with its source lines)
    <run>/<mode>/graphs/ca_<N>.json  its nodes, structured (record/graph_file.py), for diff-graphs
    <run>/<mode>/compiles/<id>/<artifact>.txt  what tlparse shows per compile id (`0_1` for [0/1],
                                   `ca0_1_0` for [!0/1/0]): the Dynamo graph, AOT forward/backward
                                   graphs, Inductor's output code, the guards, the stack it came from
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
  created but never steps is no longer waited for once another has stepped IDLE_OPTIMIZER_STEPS
  (10) times alone, and each of those is then a step (capture/steps/boundaries.py);
- with no optimizer, every top-level backward call (Tensor.backward, autograd.backward,
  autograd.grad) is a step, and the step events say so (`boundary == "backward"`).
Every top-level backward call is a `backward` event with its step and its index within the
step; the `step` event (written when the step ends) has the step's backward count, and `wall_s`,
the interval since the previous step ended (forward, every backward, optimizer). Every other
event's `step` is the step in progress when it happened (a forward compile belongs to the step
whose forward it is).

Older records, still read: schema 2 had the same steps numbered from 1; schema 1 records had one
step per backward, numbered from 1, no backward events, and events were stamped with the step last
begun (None before the first backward). The loader converts both to this shape as it reads them
(record/upgrade.py), so readers only ever see the current schema.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from typing import Any, Callable, ClassVar, Union

import msgspec
from msgspec import Struct

from cagtool.record.bounds import Seconds

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

# FindingEvent.code of a compiled-autograd capture that raised; its detail["compile_id"] is "!N".
FINDING_CA_CAPTURE_FAILED = "ca_capture_failed"
# The script sets torch._dynamo.config.compiled_autograd but calls backward outside any compiled
# function: without cagtool the job gets no compiled autograd (capture/steps/findings.py).
FINDING_CA_FLAG_WITHOUT_COMPILED_BACKWARD = "ca_flag_without_compiled_backward"
# ... and the error it raised, as it left the backward (detail: compile_id, error_type, error; source:
# the user's backward line), where it left through cagtool's backward entry point as a RuntimeError.
FINDING_CA_CAPTURE_ERROR = "ca_capture_error"

# `module.compile()` on a module whose forward is torch's own (nn.Sequential, nn.Linear): Dynamo
# compiled no frame for it, so the module ran eagerly (capture/observe/compile_calls.py; detail:
# module, forward, variable: the name the script's line calls it by, where it is a plain name,
# arguments: the call's, where plain).
FINDING_MODULE_COMPILE_SKIPPED = "module_compile_compiled_nothing"
# `torch.compile(model)` as a statement of its own, whose compiled module was collected: the model
# ran eagerly (compile_calls.py; detail: module, variable, statement: the line's call).
FINDING_COMPILED_MODULE_DROPPED = "compiled_module_dropped"
# `compiled = torch.compile(model)` of a module whose forward is the script's own, and Dynamo never
# compiled that forward in the watch: the job called `model`, eagerly, never `compiled`
# (compile_calls.py; detail: module, variable: the module's name on the line, kept_as: the compiled
# module's, statement: the line's call).
FINDING_COMPILED_MODULE_UNUSED = "compiled_module_never_called"
# Dynamo off in a compiling mode (aot, ca) where the job called torch.compile: TORCHDYNAMO_DISABLE=1 or
# TORCH_COMPILE_DISABLE=1 in the job's environment, or torch._dynamo.config.disable set by the job, so
# every compile call ran eagerly, as in the plain job with that setting (compile_calls.py; detail:
# by: what turned it off, calls: the compile calls seen).
FINDING_DYNAMO_DISABLED = "dynamo_disabled"
# A forward or backward hook registered on a module of a compiled module after its forward compiled,
# and no compile of that forward after it: Dynamo does not guard on module hooks, so the compiled
# forward never ran it (module_hooks.py; detail: method, module, path: its name in the compiled
# module, compiled: the compiled module's class).
FINDING_MODULE_HOOK_NOT_COMPILED = "module_hook_not_compiled"

# A thread of the job ended with an uncaught exception (threading.excepthook): the process goes on
# and exits as python's would, without that thread's work (detail: thread, error_type, error).
FINDING_THREAD_DIED = "thread_died"

STEP_BOUNDARY_OPTIMIZER = "optimizer"  # the step ended at an optimizer's step()
STEP_BOUNDARY_BACKWARD = "backward"  # no optimizer: the step is one backward call
# The optimizer steps inside a compiled graph (torch.compile around `opt.step()`), where no hook
# runs: the step ends at the end of its last backward before the parameters changed (their version
# counters, read at each backward's start), or, with no optimizer known, at each backward's end.
STEP_BOUNDARY_COMPILED_OPTIMIZER = "compiled_optimizer"

RUN_META_FILE = "run.json"
MANIFEST_FILE = "manifest.json"
EVENTS_FILE = "events.jsonl"
# Beside a mode's manifest, written by cagtool's own process: how long the mode's process tree ran
# and waited for a CPU, sampled on the machine's monotonic clock (capture/processes/cpu_wait.py).
CPU_WAIT_FILE = "cpu_wait.json"
# The longest line the loader reads from events.jsonl (bytes, its newline left out); a longer one
# refuses the record (exit 3) once that many bytes are read, so a damaged or forged stream of one
# endless line is never held whole. The largest events cagtool writes grow with the model: a
# grad_digest holds about 130 bytes per parameter tensor, a ca_graph about 170 per autograd node
# with its hook (measured from the writer's encoding); graph code and compile artifacts are files
# of their own (graphs/, compiles/), never in a line. 64 MiB holds about 400,000 of either, 8 times
# the parameter tensors of the largest open mixture-of-experts models (about 50,000).
MAX_EVENT_LINE_BYTES = 64 * 2**20
# The largest JSON file of a record or a baseline the readers read (run.json, a manifest, a graph's
# nodes file, cpu_wait.json, gate.json, verification.json, a baseline), each read whole: a larger one
# refuses it (exit 3) before a byte of it is read. The writers keep under it: one event line, or one
# document, is never more than this (writer.py writes a `finding` in place of an event over it, and
# leaves out a graph's nodes file over it).
MAX_JSON_FILE_BYTES = MAX_EVENT_LINE_BYTES
# The largest text file of a record the readers read (a graph's code, graphs/ca_<N>.py; a compile
# artifact, compiles/<id>/<name>.txt): a reader that needs the whole text (`cagtool compile`, the guard
# trees `recompiles` reads) refuses a larger one (exit 3) before reading it; one that shows the start
# of a file (the HTML report) reads no more than it shows. The writer cuts what it writes to this size
# (writer.py), so its own readers read every file it writes; FX code of 400,000 nodes fits.
MAX_TEXT_FILE_BYTES = MAX_EVENT_LINE_BYTES
# FindingEvent.code of the line written in place of an event over MAX_EVENT_LINE_BYTES (or of a
# graph's nodes file over MAX_JSON_FILE_BYTES, or a text file cut to MAX_TEXT_FILE_BYTES): detail
# {"kind", "bytes", "limit"}, what was left out.
FINDING_OVERSIZED_EVENT = "oversized_event_dropped"
GRAPHS_DIR = "graphs"
COMPILES_DIR = "compiles"
TRACE_DIR = "trace"
DEPYF_DIR = "depyf"
PROCS_DIR = "procs"
# The most ranks a job's record may say it has: a record saying more (a forged or damaged
# world_size or rank) is refused when read, so no report counts through it.
MAX_WORLD_SIZE = 1 << 20
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

# The events are msgspec Structs (frozen): msgspec encodes each as its line and decodes a line
# into its class by `kind` (a tagged union), checking every field's type on the way; a line's
# unknown fields are ignored (additive changes). A new field is one line in its class, with a
# default so older records still read. The records nested in events are frozen Structs too.
# A measured time is typed `Seconds` (record/bounds.py): msgspec checks its range as it decodes a
# line, the loader the rest of the rule and the columns sidecar's figures; a record holding one
# outside it is refused. A loss, a norm or a digest is the job's figure, NaN when it diverged: unbounded.


class SourceRef(Struct, frozen=True):
    """A line of the user's code. `how` says how it was found:
    `node_traceback` (the autograd node's creation traceback, exact; needs --trace-nodes),
    `compiled_frame` (the torch.compile'd function whose AOT backward the node is),
    `backward_call` (the line that called backward: the node was created in that step's forward),
    `caller` (the user's line that called the code Dynamo recompiled, e.g. `model(x)`),
    `guard` (the user frame Dynamo's guard-failure text names).
    `via`: where the line reached that code through an installed package other than torch (HF
    Trainer's `trainer.train()`), that package's innermost line on the way, `transformers/trainer.py:2172`
    (the call of the compiled model, or the line that called backward); "" where the user's line
    made the call itself.
    `wrapper`: torch's module wrapper the line's call went through to reach the code
    (`DistributedDataParallel`, `DataParallel`: `DDP(torch.compile(model))`), which holds the
    compiled module as `.module`; "" where there was none."""

    file: str
    line: int
    code: str = ""
    function: str = ""
    how: str = "backward_call"
    via: str = ""
    wrapper: str = ""


# The phase a Dynamo compile ran in (CompilePhase.phase): what the job was doing when torch
# compiled, read from the Python stack at compile time (capture/observe/compile_phase.py).
PHASE_FORWARD = "forward"  # a forward frame (the model's call, outside any backward)
PHASE_BACKWARD = "backward"  # a frame compiled while a backward ran (a hook, a function's backward)
PHASE_CA_GRAPH = "ca_graph"  # a compiled-autograd graph (its capture, or Dynamo's compile of it)
PHASE_AOT_BACKWARD = "aot_backward"  # AOTAutograd's backward graph of a forward frame
PHASE_CHECKPOINT_RECOMPUTE = "checkpoint_recompute"  # a forward re-run by activation checkpointing in the backward
CHECKPOINT_REENTRANT = "reentrant"  # torch.utils.checkpoint(use_reentrant=True): CheckpointFunction.backward
CHECKPOINT_NON_REENTRANT = "non_reentrant"  # use_reentrant=False: the saved-tensor unpack hook's recompute_fn
CHECKPOINT_SELECTIVE = "selective"  # non-reentrant with a selective-checkpoint policy (context_fn)


class CompilePhase(Struct, frozen=True):
    """Where in the job a compile happened: its phase (PHASE_*), and inside an activation-checkpoint
    recompute which checkpoint (CHECKPOINT_*) re-ran which function. `caller` is the innermost
    frame of the user's code on the stack (the `loss.backward()` of a recompute)."""

    phase: str
    checkpoint: str = ""
    function: SourceRef | None = None  # the checkpointed function (how="checkpointed_function")
    caller: SourceRef | None = None
    in_backward: bool = False  # a backward call was running (always so for a recompute)


class ChangedSize(Struct, frozen=True):
    """One entry of a changed-shapes miss: `sizes[index]` of the CA graph inputs."""

    index: int
    value: int | None = None  # the new value
    previous: int | None = None  # the old value, when it could be recovered
    node: str | None = None  # the autograd node owning this size
    node_call: int | None = None


class AutogradNodeRef(Struct, frozen=True, omit_defaults=True):
    node_call: int
    name: str
    # The parameter an AccumulateGrad node accumulates into (its module path, `0.weight`), only
    # where the capture linked it for certain (capture/observe/graph_dump.py); absent otherwise.
    param: str | None = None


class HookRef(Struct, frozen=True):
    name: str  # FX node name, e.g. call_hook
    hook_type: str  # tensor_pre_hook, pre_hook, post_hook, post_acc_grad_hook, unpack_hook...


class HookSite(Struct, frozen=True, omit_defaults=True):
    """The function behind `count` hooks of one type that a CA graph calls, all defined at one place:
    its `__qualname__` and its code's file and first line (a lambda's line is its registration's,
    usually). A module's full backward (pre-)hook runs through torch's own hook on the module's
    autograd node: it is named by the user's functions it runs, `module` their module's class."""

    hook_type: str  # HookRef.hook_type
    function: str  # `clip_grad`, `<lambda>`, `Trainer.log_norm`; the object's type name when it is no Python function
    file: str = ""
    line: int = 0
    code: str = ""  # that line's text (for a lambda, the registration, as a rule); kept for the user's files only
    module: str = ""
    count: int = 1


class Event(Struct, frozen=True, tag_field="kind"):
    kind: ClassVar[str] = ""  # the class's tag, set below from `tag=`: the line's "kind"
    seq: int
    t: float


class StepEvent(Event, tag="step"):
    """One step (see the module docstring): written when it ends, so `t` is its end."""

    step: int
    backward_s: Seconds  # wall time of the step's backward calls, summed
    # the scalar its last backward was called on (None: not a scalar, or read later, see StepDeviceEvent);
    # LBFGS's step(closure): the closure's last call, where step() returns its first
    loss: float | None = None
    ca_captures: int = 0  # CA graphs captured during the step (cache misses)
    compiles: int = 0  # Dynamo compiles that finished during the step (forward or CA)
    compile_s: Seconds = 0.0  # wall seconds spent in those compiles and captures
    # schema 2:
    wall_s: Seconds | None = None  # since the previous step ended (None for the first step)
    backward_calls: int = 1
    boundary: str = ""  # STEP_BOUNDARY_OPTIMIZER | STEP_BOUNDARY_BACKWARD | STEP_BOUNDARY_COMPILED_OPTIMIZER ("" in schema 1)
    optimizer_s: Seconds = 0.0  # wall time in optimizer step() calls during the step
    # The step ended at a grad scaler's step() that skipped the optimizer's (torch.amp.GradScaler:
    # inf or NaN gradients, as in an fp16 job's first steps): counted as a step, as training
    # frameworks count it, with no optimizer_step event.
    skipped: bool = False
    # The process's CPU time (all its threads) since the previous step ended (None for the first
    # step, and in records written before it was kept).
    cpu_s: Seconds | None = None
    # The CPU time of the thread that ended the step (the training loop's), over the same span:
    # below its wall time less its wait for a CPU, the step spent time off the CPU (sleep, I/O,
    # a device). None where the step's two ends were in different threads.
    thread_cpu_s: Seconds | None = None
    # An evaluation ran in the step's span: a module was switched from training to eval mode
    # (`.eval()`, as Lightning's validation loop, HF Trainer's evaluate() and a script's evaluation
    # between epochs do) after the previous step ended. Its wall and CPU times hold the evaluation's;
    # the steady figures leave it out (report/figures/metrics.py, `interrupted_steps`).
    evaluation: bool = False
    # A DataLoader started its worker processes in the step's span (an iterator made with
    # num_workers > 0: each epoch's, unless persistent_workers): its time holds their start-up and
    # the wait for their first batch; left out of the steady figures as an evaluation's step is.
    workers_started: bool = False


class BackwardEvent(Event, tag="backward"):
    """One top-level backward call (Tensor.backward, autograd.backward or autograd.grad)."""

    # written when the call returns: `t` is its end
    step: int  # the step it belongs to
    index: int  # 0, 1, ... within the step (gradient accumulation: one per micro-batch)
    backward_s: Seconds  # wall time of the call
    ca_captures: int = 0  # CA graphs captured during it
    call: str = "backward"  # "backward" (accumulates into .grad) or "grad" (autograd.grad)
    loss: float | None = None  # the scalar it was called on, when read without a device sync (CPU)
    thread: str = ""  # the thread's name when it is not the main thread


class StepDeviceEvent(Event, tag="step_device"):
    """Figures of step `step` read from the device after the fact, never stalling it: `device_s`,
    the time between CUDA events recorded on the stream at the step's two boundaries (written once
    the later one has completed), and `loss`, read at the end of the run. Either may be None."""

    step: int
    device_s: Seconds | None = None
    loss: float | None = None


class OptimizerStepEvent(Event, tag="optimizer_step"):
    step: int  # the step it belongs to (schema 1: the backward it follows)
    wall_s: Seconds
    optimizer: str = ""


class CacheMissEvent(Event, tag="ca_cache_miss"):
    """A compiled-autograd cache miss: the reason torch gave for capturing graph `ca_id`."""

    ca_id: int
    compile_id: str  # "!N"
    step: int | None
    miss_kind: str  # MISS_NEW_NODE | MISS_CHANGED_SHAPES | MISS_UNKNOWN
    message: str  # verbatim from torch
    node: str | None = None
    node_call: int | None = None
    key_size: int | None = None
    previous_key_sizes: list[int] = []
    changed_sizes: list[ChangedSize] = []
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


class CAGraphEvent(Event, tag="ca_graph"):
    """A compiled-autograd graph, captured."""

    ca_id: int
    compile_id: str  # "!N"
    step: int | None
    node_count: int
    op_histogram: dict[str, int]
    autograd_nodes: list[AutogradNodeRef]
    aot_ids: list[int]  # AOT backward graphs inlined (nodes named aot<id>_*)
    hooks: list[HookRef]
    num_sizes: int  # dynamic sizes the graph takes
    capture_s: Seconds
    code_file: str  # relative to the mode dir
    nodes_file: str
    # who set up the compiler ("cagtool" or "script": the script's own `_enable`/CA flag kept) and,
    # after a colon, what compiled the graph (torch.compile's backend, else the compiler's name)
    compiler: str = ""
    # The graph was compiled by torch.compile(..., fullgraph=True) (TorchRec's compiled autograd):
    # a graph break in its code, a hook under torch._dynamo.disable among them, is an error there.
    fullgraph: bool = False
    # The capture's sizes its code reads, by their index in the capture's (and its cache miss's)
    # numbering, in order: torch drops the sizes no node reads and numbers the rest anew
    # (remove_unused_sizes), so the code's `sizes[k]` is the miss's `sizes[used_sizes[k]]`. None where
    # not recorded (an older record, an imported log).
    used_sizes: list[int] | None = None

    def autograd_names(self) -> Counter[str]:
        """The autograd nodes the graph covers, by name; from the op histogram when the capture
        could not map NodeCalls (its keys include each autograd node's name, e.g. `MulBackward0`)."""
        if self.autograd_nodes:
            return Counter(ref.name for ref in self.autograd_nodes)
        return Counter({k: v for k, v in self.op_histogram.items() if _AUTOGRAD_NODE.search(k)})


_AUTOGRAD_NODE = re.compile(r"(Backward\d*|AccumulateGrad|GraphRoot)$")


class CACompileEvent(Event, tag="ca_compile"):
    """The first call of compiled-autograd graph `ca_id`: compile (lazy) plus one execution."""

    ca_id: int
    first_call_s: Seconds
    step: int | None = None
    ok: bool = True
    error: str = ""
    # The hooks the graph calls, named: read from the hooks torch hands this first call (the hooks
    # of the capture's own backward), never called (capture/observe/hook_sites.py).
    hooks: list[HookSite] = []


class DynamoCompileEvent(Event, tag="dynamo_compile"):
    """One Dynamo compile (torch's compilation_metrics). `is_ca_graph` when it compiles a CA graph."""

    compile_id: str
    is_ca_graph: bool
    step: int | None
    co_name: str = ""
    co_filename: str = ""
    co_firstlineno: int | None = None
    # The compiled code's parameters, in order (None: not read, an older record or an imported log)
    co_argnames: list[str] | None = None
    entire_frame_compile_time_s: Seconds | None = None
    backend_compile_time_s: Seconds | None = None
    inductor_compile_time_s: Seconds | None = None
    dynamo_cumulative_compile_time_s: Seconds | None = None
    aot_autograd_cumulative_compile_time_s: Seconds | None = None
    inductor_cumulative_compile_time_s: Seconds | None = None
    graph_op_count: int | None = None
    guard_count: int | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    has_guarded_code: bool | None = None
    phase: CompilePhase | None = None  # None in records made before it was kept, and imported logs
    recompile_limit: int | None = None  # torch._dynamo.config.recompile_limit when it compiled
    # torch._dynamo.config.assume_static_by_default when it compiled: False under
    # torch.compile(..., dynamic=True) (None: not read, an older record or an imported log).
    assume_static_by_default: bool | None = None
    # A graph break in this frame is an error: compiled with torch.compile(..., fullgraph=True) or
    # under torch._dynamo.error_on_graph_break(True) (None: not read, an older record or an imported log).
    fullgraph: bool | None = None


class DynamoRecompileEvent(Event, tag="dynamo_recompile"):
    """Dynamo recompiled a frame (or a CA graph) because a guard failed; reasons verbatim."""

    compile_id: str
    is_ca_graph: bool
    step: int | None
    reasons: list[str]
    # The user's line that called the recompiled code (the first frame of the user's own code on
    # the stack, or in an imported log the stack torch logged with the compile); None when unknown.
    source: SourceRef | None = None
    phase: CompilePhase | None = None


class GraphBreakEvent(Event, tag="graph_break"):
    compile_id: str
    step: int | None
    reason: str  # the first lines of torch's message
    file: str = ""
    line: int | None = None
    code: str = ""
    # The lines after `code` where the call it opens goes on (`logger.warning_once(` and its
    # message's lines), joined, up to CALL_LINES of them: what the call says (empty: one line)
    rest: str = ""


class BackwardCompileEvent(Event, tag="backward_compile"):
    """AOTAutograd compiled a forward frame's backward at its first call, apart from the frame's
    compile (torch's backward CompilationMetrics, `bwd_compilation_metrics` in a TORCH_TRACE log:
    Inductor compiles a backward lazily, seconds for a small model). Its time counts in the mode's
    compile time; a CA graph holds the AOT backwards it inlines, so the ca mode has none of these."""

    compile_id: str  # the forward frame's
    step: int | None
    compile_time_s: Seconds | None = None  # torch's backward_cumulative_compile_time_us
    inductor_compile_time_s: Seconds | None = None
    fail_type: str | None = None


class AotBackwardGraphEvent(Event, tag="aot_backward_graph"):
    """AOTAutograd built a backward graph for a forward frame (counted as a backward graph in `aot`)."""

    compile_id: str
    step: int | None


# What a compile left, by torch's name for its structured record (tlparse's names for them).
ARTIFACT_STACK = "dynamo_start"  # the stack the compile came from, outermost frame first
ARTIFACT_DYNAMO_GRAPH = "dynamo_output_graph"
ARTIFACT_AOT_FORWARD = "aot_forward_graph"
ARTIFACT_AOT_BACKWARD = "aot_backward_graph"
ARTIFACT_INDUCTOR_CODE = "inductor_output_code"
ARTIFACT_GUARDS = "dynamo_cpp_guards_str"
# The order a compile makes them in, the order reports list them in.
COMPILE_ARTIFACTS = (ARTIFACT_STACK, ARTIFACT_DYNAMO_GRAPH, ARTIFACT_AOT_FORWARD, ARTIFACT_AOT_BACKWARD, ARTIFACT_INDUCTOR_CODE, ARTIFACT_GUARDS)
ARTIFACT_TITLES = {
    ARTIFACT_STACK: "stack",
    ARTIFACT_DYNAMO_GRAPH: "Dynamo graph",
    ARTIFACT_AOT_FORWARD: "AOT forward graph",
    ARTIFACT_AOT_BACKWARD: "AOT backward graph",
    ARTIFACT_INDUCTOR_CODE: "Inductor output code",
    ARTIFACT_GUARDS: "guards",
}


def compile_dir_name(compile_id: str) -> str:
    """The folder of a compile id's artifacts: `0_1` for torch's [0/1], `ca0_1_0` for [!0/1/0]."""
    text = compile_id.strip("[]")
    prefix = "ca" if text.startswith("!") else ""
    safe = "".join(c if c.isalnum() else "_" for c in text.lstrip("!"))
    return prefix + safe


class CompileArtifactEvent(Event, tag="compile_artifact"):
    """One of a compile's artifacts (COMPILE_ARTIFACTS), its text in `file` (relative to the mode dir)."""

    compile_id: str
    artifact: str
    file: str
    step: int | None = None
    lines: int = 0


class FindingEvent(Event, tag="finding"):
    """Something the user should know that is not an error, e.g. `ca_flag_without_compiled_backward`."""

    code: str
    message: str
    step: int | None = None
    source: SourceRef | None = None
    # What the finding is about, as data (e.g. process_not_followed: the argv that was started,
    # the executable, the reason).
    detail: dict[str, Any] = {}


class DDPModelEvent(Event, tag="ddp_model"):
    """A DistributedDataParallel model was built. `reducer`: "python" (per-parameter all-reduce in
    post-accumulate-grad hooks, what compiled autograd needs) or "cpp" (torch's C++ Reducer with
    buckets). `optimize_ddp` is the setting DDP read; `set_by` says who chose it ("cagtool" in
    ca mode, unless the script had set it to "python_reducer" itself; else "script"); `script_optimize_ddp` is what the script itself assigned, if anything."""

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


class FinalStateEvent(Event, tag="final_state"):
    """Numerics at the end of the run, for comparing modes."""

    param_norm: float | None
    grad_norm: float | None
    num_params: int
    # whose norms (capture/steps/sharded.py): "optimizer" (its parameters), "model" (the modules'
    # parameters, where the optimizer held a flat partition of its own), "shards" (each rank's shard)
    of: str = "optimizer"
    # The optimizers' parameters, read by their version counters from each optimizer's creation on:
    # how many were watched and how many an in-place update changed since (a step, or any in-place
    # write that is not through `.data`); the names of those that never changed, the first 20
    # (final_state.py). None: not read (an older record, or no optimizer made while recording).
    params_watched: int | None = None
    params_updated: int | None = None
    never_updated: list[str] = []
    # Of the parameters normed, how many lie in CPU shared memory (`Tensor.share_memory_()`, which
    # torch.multiprocessing's Hogwild training does to a model its processes all train): other
    # processes write them between this one's steps. None: not read (an older record).
    params_shared: int | None = None


FINAL_OF_SHARDS = "shards"  # FinalStateEvent.of: norms of each rank's own shard, not comparable across ranks


# How a digested tensor that no module holds is named ("<optimizer tensor 0>"): the optimizer's own
# tensor, e.g. a sharded optimizer's flat partition, each rank's own slice.
OPTIMIZER_TENSOR_PREFIX = "<optimizer tensor "
# And a digested tensor that no module holds and no optimizer stepped ("<unnamed tensor 0>"): a leaf
# of a backward-only job's graph whose module was gone when it was first digested.
UNNAMED_TENSOR_PREFIX = "<unnamed tensor "


# GradDigestEvent.reasons. A step digested only as the run's last (["last"]) was digested at the
# run's end; any other was digested in an optimizer's step pre-hook, or, without an optimizer, where
# the step's backward returned (capture/steps/grad_digest.py). "same_at_end": the run's last step,
# digested during the run, and its gradients digested again at the run's end were the same, number
# for number: the digest stands for both moments.
REASON_FIRST = "first"
REASON_RECOMPILE = "recompile"
REASON_EVERY = "every"
REASON_EARLIER_MODE = "earlier_mode"
REASON_LAST = "last"
REASON_SAME_AT_END = "same_at_end"


class GradDigestEvent(Event, tag="grad_digest"):
    """Per-parameter gradient digests at one step (capture/steps/grad_digest.py), written at the end of
    the run (read back from the device then). Parallel lists, one item per parameter, named by
    module path; None where the parameter had no gradient. `reasons` says why the step was digested:
    first, recompile (a CA capture or Dynamo compile in the step), every (--parity-every),
    earlier_mode (an earlier mode of the run digested it), last (the run's last step), same_at_end
    (the last step's gradients at the run's end were those digested during it)."""

    step: int
    reasons: list[str]
    names: list[str]
    dtypes: list[str]
    numels: list[int]
    norm: list[float | None]  # L2 norm of the gradient
    max_abs: list[float | None]
    checksum: list[float | None]  # sum_i g_i * (1 + (i mod 1021) / 1021)
    # True where this rank holds only a shard of the parameter (FSDP2's DTensor, tensor parallel):
    # the digest is of its shard, comparable with the same rank of another mode, never across
    # ranks; None in records written before it.
    shard: list[bool] | None = None


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__struct_config__.tag: cls
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
        BackwardCompileEvent,
        CompileArtifactEvent,
        FindingEvent,
        FinalStateEvent,
        DDPModelEvent,
        GradDigestEvent,
    )
}



# The kind a line carries is the class's msgspec tag (`class StepEvent(Event, tag="step")`): one
# spelling, read back here as the class attribute every reader uses (`event.kind`, `cls.kind`).
for _kind, _cls in EVENT_TYPES.items():
    _cls.kind = _kind
del _kind, _cls

# Any event, told apart by its "kind" (msgspec's tagged union): what one line decodes to.
AnyEvent = Union[tuple(EVENT_TYPES.values())]  # type: ignore[valid-type]

_ENCODER = msgspec.json.Encoder()


@cache
def _decoders() -> tuple[msgspec.json.Decoder, msgspec.json.Decoder]:
    """(one line, a list of lines): built on first use, not at import, because building them reads
    every event class's annotations (a fifth of importing the record modules), and `cagtool runs`
    or `--help` decode no event."""
    return msgspec.json.Decoder(AnyEvent), msgspec.json.Decoder(list[AnyEvent])  # type: ignore[valid-type]


def decode_event(line: str | bytes) -> Event:
    """One line as its typed event. Raises `msgspec.ValidationError` for a line of a known kind
    whose fields are missing or of the wrong type (the message names the field, e.g. "Expected
    `int`, got `str` - at `$.step`") and for an unknown kind ("Invalid value 'x' - at `$.kind`"),
    `msgspec.DecodeError` for text that is not JSON to msgspec (NaN and Infinity, json's spelling: `event_from_value`)."""
    try:
        return _decoders()[0].decode(line)
    except RecursionError:  # nested deeper than the decoder goes: as damaged as bad JSON
        raise msgspec.DecodeError("JSON nested too deeply") from None


def decode_events(lines: list[str]) -> list[Event] | None:
    """Every line as its event, in one decode, or None when any line is not a valid event (the
    caller then decodes them one by one, so a bad line costs only itself)."""
    try:
        return _decoders()[1].decode("[" + ",".join(lines) + "]")
    except (msgspec.DecodeError, RecursionError):  # ValidationError included
        return None


def event_from_value(value: Any) -> Event | None:
    """A decoded JSON object (as `json.loads` gives it: NaN and Infinity included) as its typed
    event, validated as a line is; None for an unknown kind. Raises `msgspec.ValidationError`."""
    kind = value.get("kind") if isinstance(value, dict) else None
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        return None
    return msgspec.convert(value, AnyEvent)


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as the JSON object of its line (`kind` first, nested records as dicts)."""
    return msgspec.to_builtins(event)  # type: ignore[no-any-return]


def json_default(obj: Any) -> Any:
    """json.dumps(default=...) for documents holding events or their nested records."""
    return msgspec.to_builtins(obj)


def event_line(event: Event) -> str:
    """The event's line, with its newline: json's layout (", " and ": "), the layout the loader's
    kind filter and the columns sidecar read fastest. msgspec writes a NaN or an infinity as null,
    which would read back as "no value" (a diverged loss as a missing one); the rare event holding
    one is written by `json`, as NaN / Infinity, which the loader reads back."""
    data = _ENCODER.encode(event)
    # find, not `in`: bytes' `in` tries the needle as an int first, raising and clearing a TypeError.
    if data.find(b"null") >= 0 and not _finite_event(event):
        import json

        return json.dumps(msgspec.to_builtins(event), ensure_ascii=False, allow_nan=True) + "\n"
    return msgspec.json.format(data, indent=0).decode() + "\n"



_LETTER_N = ord("n")


def scalar_lines(*classes: type[Event]) -> Callable[[tuple[Any, ...]], bytes]:
    """`lines(values) -> bytes`: "".join(event_line(cls(*fields)) ...), in UTF-8, for one event of each of
    `classes` (events whose fields are all scalars: numbers, strings, bools, None), `values` their
    fields by position, in the order of each class's `__struct_fields__`, one class after the other.
    The step tracker's per-step lines (capture/steps/lines.py): no event is built, and msgspec encodes
    the values once, as an array, rather than encoding events and re-formatting the text into json's
    layout (`msgspec.json.format`): its text of each value (a float's shortest digits, a string's
    escapes, null, true) goes between the keys, written in that layout once, here. The array's text
    splits at its commas into one piece a value, kept as bytes (msgspec's UTF-8, which the writer
    writes as it is: no str made of each piece, nor of the lines), unless a string holds a comma (a
    comma's byte is in no other character's UTF-8): then, and where a
    float is NaN or infinite (msgspec's null, where `event_line` writes json's NaN), the events are
    built and written by `event_line`."""
    sizes = [len(cls.__struct_fields__) for cls in classes]
    # The text before each value and after the last, with a place for each value between:
    # [before value 0, None, before value 1, None, ..., after the last].
    around: list[bytes | None] = []
    closing = ""
    for cls in classes:
        for index, name in enumerate(cls.__struct_fields__):
            opening = closing + '{"kind": ' + msgspec.json.encode(cls.__struct_config__.tag).decode() + ", " if index == 0 else ", "
            around += [(opening + msgspec.json.encode(name).decode() + ": ").encode(), None]
        closing = "}\n"
    around.append(closing.encode())
    count = sum(sizes)
    encode = _ENCODER.encode

    def built(values: tuple[Any, ...]) -> bytes:
        events, start = [], 0
        for cls, size in zip(classes, sizes):
            events.append(cls(*values[start:start + size]))
            start += size
        return "".join([event_line(event) for event in events]).encode()

    def lines(values: tuple[Any, ...]) -> bytes:
        data = encode(values)
        parts = data[1:-1].split(b",")
        # A null is a None of `values`, or a NaN or infinity msgspec wrote as null (no "n" in the
        # text, usually: only null and a string can hold one). The byte as an int: a bytes needle
        # costs `in` a TypeError raised and cleared first (~1.6k instructions).
        if len(parts) != count or (_LETTER_N in data and b"null" in parts and parts.count(b"null") != values.count(None)):
            return built(values)
        text = around.copy()
        text[1::2] = parts
        return b"".join(text)

    return lines


_NO_FLOAT = (int, str, bool, type(None))
_FLOAT_FIELDS: dict[type, tuple[str, ...]] = {}  # per event class: the fields that may hold a float


def _finite_event(event: Event) -> bool:
    cls = type(event)
    names = _FLOAT_FIELDS.get(cls)
    if names is None:
        names = _FLOAT_FIELDS[cls] = tuple(
            f.name for f in msgspec.structs.fields(cls) if not (f.type in _NO_FLOAT or all(arg in _NO_FLOAT for arg in getattr(f.type, "__args__", (float,))))
        )
    return all(_finite(getattr(event, name)) for name in names)


def _finite(value: Any) -> bool:
    """Whether no float in `value` (a field's value: a number, a nested record, a list or dict) is NaN or infinite."""
    kind = value.__class__
    if kind is float:
        return value - value == 0.0
    if kind is list or kind is tuple:
        return all(_finite(v) for v in value)
    if kind is dict:
        return all(_finite(v) for v in value.values())
    if isinstance(value, Struct):  # a nested record
        return all(_finite(getattr(value, name)) for name in value.__struct_fields__)
    return True
