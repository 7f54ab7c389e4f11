"""The script's compile calls that compiled nothing: it asked for torch.compile and its model ran
eagerly, with nothing said by torch.

Two of them (docs/torch-internals.md, "A compile call that compiles nothing"):

- `module.compile()` on a module whose forward is torch's own (nn.Sequential, nn.Linear). It sets
  the module's `_compiled_call_impl` to `torch.compile(self._call_impl)`; torch 2.13's Dynamo skips
  `_call_impl` (torch/nn/modules/module.py is in its skip rules) and that forward too, so no frame
  is left to compile (pytorch/pytorch#150915). `torch.compile(module)` wraps such a forward in a
  frame of Dynamo's own (`wrap_inline`'s `inner`) and compiles it, and so does torch 2.14's
  Module.compile(). A forward of the script's own is compiled under `module.compile()` as under
  `torch.compile(module)`.
- `torch.compile(model)` as a statement of its own: torch.compile is not in place, and the compiled
  module it returned was dropped (collected by the end of the watch), so every call of `model` is
  the module's own, eager.
- `compiled = torch.compile(model)`, and the job calls `model`, never `compiled`: of a module whose
  forward is the script's own, Dynamo never compiled that forward's code in the watch (none had
  before the call either, so no cache of it could serve a call), with Dynamo on.

The taps call torch's function first, unchanged, then note the call. `module.compile()`: the
module's class, whether Dynamo's rules skip its forward, the user's line, and how many times
Dynamo had compiled that forward's code and its own wrapper frames by then
(`StructuredLogHandler.code_compiles`); said where neither compiled after it (other frames of the
job compiling meanwhile, a torch.compile'd loss, do not compile the module; a module a library
hooks, DeepSpeed's engine, has its forward compiled as a frame of its own). `torch.compile(...)` on the line's own statement: a weak
reference to the compiled module it returned, said where that module was collected. Each is said
as a finding at the end of the watch (`note_compiled_nothing`), once per line. A failure in a tap
is counted by the handler, never raised into the job."""

from __future__ import annotations

import linecache
import os
import re
import sys
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from cagtool.capture.observe import source
from cagtool.capture.observe.torch_logs import WRAPPER_FILE
from cagtool.torch_text import in_torch_optim
from cagtool.record.schema import (
    FINDING_COMPILED_MODULE_DROPPED,
    FINDING_COMPILED_MODULE_UNUSED,
    FINDING_DYNAMO_DISABLED,
    FINDING_MODULE_COMPILE_SKIPPED,
    FindingEvent,
    SourceRef,
)

if TYPE_CHECKING:
    from cagtool.capture.observe.torch_logs import StructuredLogHandler

# `model.compile(` / `self.encoder.compile(` on the script's line: the name the fix compiles.
_CALLED_ON = re.compile(r"([A-Za-z_][\w.]*)\s*\.\s*compile\s*\(")
# `torch.compile(model, ...)` as the whole statement: its result goes nowhere.
_DROPPED = re.compile(r"\s*torch\s*\.\s*compile\s*\(\s*(?P<name>[A-Za-z_][\w.]*)\s*[,)]")
# Arguments written back into the fix as they were passed; anything else is left to the user.
_PLAIN = (str, bool, int, float, type(None))


@dataclass
class ModuleCompile:
    """One `module.compile()` call of the job."""

    module: str  # the module's class, qualified
    forward: str  # its forward, qualified ("torch.nn.modules.container.Sequential.forward")
    skipped: bool  # Dynamo's rules skip its forward
    source: SourceRef | None  # the user's line
    step: int | None
    compiles_before: int  # compiles of its forward's code and of Dynamo's wrapper frames before the call
    forward_code: tuple[str, int] | None  # its forward's code (file, first line)
    arguments: str  # the call's arguments, for the fix ("backend='aot_eager'"), "..." where not plain


@dataclass
class DroppedCompile:
    """One `torch.compile(model, ...)` statement whose result nothing kept."""

    compiled: Any  # a weak reference to the compiled module it returned
    module: str  # the module's class, qualified
    name: str  # what the line passes (`model`)
    statement: str  # the line's call (`torch.compile(model, backend="aot_eager")`)
    source: SourceRef
    step: int | None


# The job's torch.compile calls kept for the record (the manifest's `compile_calls`): the first few
# make a job's models; a loop compiling anew each time is told by its recompiles, not by this list.
MAX_COMPILE_CALLS = 16


def _dynamic_given(kwargs: dict[str, Any]) -> Any:
    """torch.compile's `dynamic` as the call passed it: None (unset: automatic dynamic shapes),
    True, False, or "other" where it is no bool."""
    value = kwargs.get("dynamic")
    return value if value is None or isinstance(value, bool) else "other"


def _backend_given(kwargs: dict[str, Any]) -> str:
    """torch.compile's `backend` by name: "inductor" where unset (torch's default), a string as
    given, else the callable's name (a compiler function, or torch's own backends' objects)."""
    value = kwargs.get("backend", "inductor")
    name = value if isinstance(value, str) else getattr(value, "__name__", None) or type(value).__name__
    return str(name)[:64]


def _in_place(target: Any) -> bool:
    """Whether torch.compile was given a module's bound `_call_impl`: Module.compile(), which
    compiles the module in place (no wrapper: it has no `_orig_mod`)."""
    owner = getattr(target, "__self__", None)
    return owner is not None and hasattr(owner, "_parameters") and getattr(target, "__name__", "") == "_call_impl"


def _compiled_code(target: Any) -> tuple[str, int] | None:
    """The code Dynamo compiles first for `target`: a module's forward, a function's own code
    (file, first line); None for anything else. Module.compile() calls torch.compile on the
    module's bound `_call_impl`: its module's forward."""
    owner = getattr(target, "__self__", None)
    if owner is not None and hasattr(owner, "_parameters") and getattr(target, "__name__", "") == "_call_impl":
        target = owner
    forward = getattr(type(target), "forward", None) if hasattr(target, "_parameters") else target
    code = getattr(getattr(forward, "__func__", forward), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


@dataclass
class UnusedCompile:
    """One `NAME = torch.compile(MODEL, ...)` of a module whose forward is the script's own (not in
    Dynamo's skip rules), made while Dynamo had never compiled that forward's code."""

    module: str  # the module's class, qualified
    name: str  # what the line passes (`model`)
    kept_as: str  # what the line assigns the compiled module to (`compiled`)
    statement: str  # the line's call (`torch.compile(model, backend="aot_eager")`)
    source: SourceRef
    step: int | None
    forward_code: tuple[str, int]
    frames_before: int  # Dynamo's compiles of frames (torch.optim's apart) before the call (_frame_compiles)


# `compiled = torch.compile(model, ...)` / `self.net = torch.compile(self.encoder)`: a compiled
# module kept under a name other than the module's own.
_KEPT = re.compile(r"\s*(?P<kept>[A-Za-z_][\w.]*)\s*=\s*torch\s*\.\s*compile\s*\(\s*(?P<name>[A-Za-z_][\w.]*)\s*[,)]")


def _frame_compiles(handler: "StructuredLogHandler") -> int:
    """Dynamo's compiles of frames so far, compiled-autograd graphs and torch.optim's frames apart
    (a compiled optimizer step calls no model): where one more was made, it may have inlined the
    module's forward (Lightning compiles a compiled LightningModule's training_step, which calls it)."""
    return sum(n for (file, _), n in handler.code_compiles.items() if not in_torch_optim(file))


def _dynamo_disabled() -> bool:
    """Dynamo off: every compiled call runs eagerly and compiles nothing, called or not (cagtool's
    eager mode sets both switches; docs/torch-internals.md, "Dynamo switched off")."""
    return _disabled_by() is not None


def _disabled_by() -> str | None:
    """What turned Dynamo off: TORCHDYNAMO_DISABLE=1, which torch.compile reads at each call
    (`torch._dynamo.optimize` returns a decorator that compiles nothing), or
    torch._dynamo.config.disable (TORCH_COMPILE_DISABLE=1 sets it at import, a script may set it);
    None where it is on."""
    if os.environ.get("TORCHDYNAMO_DISABLE", "") == "1":
        return "TORCHDYNAMO_DISABLE=1"
    config = sys.modules.get("torch._dynamo.config")
    if not getattr(config, "disable", False):
        return None
    return "TORCH_COMPILE_DISABLE=1" if os.environ.get("TORCH_COMPILE_DISABLE", "0") == "1" else "torch._dynamo.config.disable = True"


def _job_code(code: tuple[str, int] | None) -> bool:
    """A code of the job's own: not a graph module's generated code (a compiled-autograd graph,
    compiled as it is captured, is no model of the job's)."""
    return code is not None and not code[0].startswith("<eval_with_key>")


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if any(not isinstance(v, _PLAIN) for v in (*args, *kwargs.values())):
        return "..."
    return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def _line(where: SourceRef | None) -> str:
    if where is None or not where.file or not where.line:
        return ""
    return linecache.getline(where.file, where.line)


def _call_text(line: str) -> str:
    """The line's first call, from its start to its closing parenthesis (`torch.compile(m, x=f(1))`
    of `torch.compile(m, x=f(1)); y = 2`), the line as it is where it does not close there."""
    text = line.strip()
    depth = 0
    for end, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            return text[:end + 1]
    return text


def _compiles_of(handler: "StructuredLogHandler", forward: tuple[str, int] | None) -> int:
    """How many times Dynamo compiled the code `forward` and its own wrapper frames (WRAPPER_FILE):
    what compiling a module whose forward its rules skip compiles."""
    return sum(n for key, n in handler.code_compiles.items() if key == forward or key[0].endswith(WRAPPER_FILE))


def _called_on(where: SourceRef | None) -> str | None:
    """The name the user's line calls `.compile()` on (`model`, `self.encoder`), where one is."""
    found = _CALLED_ON.findall(_line(where))
    return found[0] if len(found) == 1 else None


class CompileCalls:
    """The taps on torch.nn.Module.compile and torch.compile, and the calls they saw."""

    def __init__(self, handler: "StructuredLogHandler") -> None:
        self.handler = handler
        self.module_calls: list[ModuleCompile] = []
        self.dropped: list[DroppedCompile] = []
        self.unused: list[UnusedCompile] = []
        # The modules torch.compile(module) and module.compile() compiled (weak references, the
        # first MAX_COMPILE_CALLS), with the code their calls compile and the call's line:
        # module_hooks.py looks for a hooked module among them.
        self.compiled_modules: list[tuple[Any, tuple[str, int], SourceRef | None]] = []
        # Each torch.compile call given a module or function, up to MAX_COMPILE_CALLS: where it was
        # made (its line, and a library's on the way: accelerate's, under HF Trainer), `dynamic` as
        # passed, and the code it compiles first (report/recompiles: a size recompile's fix names
        # the switch of the library that made the call).
        self.calls: list[dict[str, Any]] = []
        self._restore: list[Callable[[], None]] = []

    def compiles_of(self, code: tuple[str, int]) -> int:
        """Dynamo's compiles so far of `code` and of its own wrapper frames (what a compiled
        module's calls compile)."""
        return _compiles_of(self.handler, code)

    def _failed(self, exc: Exception) -> None:
        self.handler.errors += 1
        self.handler.last_error = f"{type(exc).__name__}: {exc}"

    def install(self) -> None:
        import torch

        self._tap_module_compile(torch)
        self._tap_torch_compile(torch)

    def _tap_module_compile(self, torch: Any) -> None:
        module_class = torch.nn.Module
        original = module_class.__dict__.get("compile")
        if not callable(original):
            return  # a torch without Module.compile: nothing to watch
        calls, handler = self.module_calls, self.handler
        # torch 2.14 and later compile a module of torch's own under Module.compile() (the fix of
        # pytorch/pytorch#150915): nothing to say there, in any mode (one with Dynamo off included).
        compiles_torchs_own = torch.torch_version.TorchVersion(torch.__version__) >= (2, 14)

        def compile(module: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's name
            cls = type(module)
            forward = getattr(cls, "forward", None)
            code = getattr(forward, "__code__", None)
            key = (code.co_filename, code.co_firstlineno) if code is not None else None
            before = _compiles_of(handler, key)
            result = original(module, *args, **kwargs)
            try:
                from torch._dynamo import trace_rules

                if key is not None and len(self.compiled_modules) < MAX_COMPILE_CALLS:
                    self.compiled_modules.append((weakref.ref(module), key, source.user_caller(how="caller")))
                calls.append(ModuleCompile(
                    module=f"{cls.__module__}.{cls.__qualname__}",
                    forward=f"{getattr(forward, '__module__', '?')}.{getattr(forward, '__qualname__', 'forward')}",
                    skipped=bool(forward is not None and trace_rules.check(forward)) and not compiles_torchs_own,
                    source=source.user_caller(how="caller"),
                    step=handler.steps.current_step,
                    compiles_before=before,
                    forward_code=key,
                    arguments=_arguments(args, kwargs),
                ))
            except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
                self._failed(exc)
            return result

        compile.__wrapped__ = original  # type: ignore[attr-defined]
        compile.__doc__ = original.__doc__
        module_class.compile = compile  # type: ignore[method-assign]

        def restore() -> None:
            if module_class.__dict__.get("compile") is compile:
                module_class.compile = original  # type: ignore[method-assign]

        self._restore.append(restore)

    def _tap_torch_compile(self, torch: Any) -> None:
        original = torch.__dict__.get("compile")
        if not callable(original):
            return
        dropped, handler, calls, unused = self.dropped, self.handler, self.calls, self.unused

        def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's name
            result = original(*args, **kwargs)
            if len(calls) < MAX_COMPILE_CALLS:
                try:
                    target = args[0] if args else kwargs.get("model")
                    code = _compiled_code(target) if target is not None else None
                    if _job_code(code):
                        where = source.user_caller(how="caller")
                        calls.append({"file": where.file if where is not None else "", "line": where.line if where is not None else 0,
                                      "via": where.via if where is not None else "", "dynamic": _dynamic_given(kwargs), "code": list(code),
                                      "in_place": _in_place(target), "backend": _backend_given(kwargs)})
                except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
                    self._failed(exc)
            # Read where torch.compile has imported it: installing the taps imports nothing of torch's
            # (torch._dynamo costs a process ~1 s of CPU; an eager-mode process never imports it).
            optimized = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
            if optimized is not None and isinstance(result, optimized):
                try:
                    where = source.user_caller(how="caller")
                    line = _line(where)
                    statement, call = _DROPPED.match(line), _call_text(line)
                    rest = line.strip()[len(call):].strip()  # nothing, a comment or the next statement: the call is the statement
                    if where is not None and statement is not None and (not rest or rest[0] in "#;"):
                        cls = type(getattr(result, "_orig_mod", None))
                        dropped.append(DroppedCompile(weakref.ref(result), f"{cls.__module__}.{cls.__qualname__}", statement["name"],
                                                      call, where, handler.steps.current_step))
                    kept = _KEPT.match(line)
                    module = getattr(result, "_orig_mod", None)
                    if module is not None and len(self.compiled_modules) < MAX_COMPILE_CALLS and _job_code(key := _compiled_code(module)):
                        self.compiled_modules.append((weakref.ref(module), key, where))  # type: ignore[arg-type]
                    forward = getattr(type(module), "forward", None)
                    code = _compiled_code(module) if module is not None else None
                    if (where is not None and kept is not None and kept["kept"] != kept["name"] and code is not None
                            and not _dynamo_disabled() and not handler.code_compiles.get(code)):
                        from torch._dynamo import trace_rules

                        if not trace_rules.check(forward):
                            cls = type(module)
                            unused.append(UnusedCompile(f"{cls.__module__}.{cls.__qualname__}", kept["name"], kept["kept"],
                                                        _call_text(line[line.index("=") + 1:]), where, handler.steps.current_step, code,
                                                        _frame_compiles(handler)))
                except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
                    self._failed(exc)
            return result

        compile.__wrapped__ = original  # type: ignore[attr-defined]
        for name in ("__doc__", "__name__", "__qualname__", "__module__", "__annotations__"):
            setattr(compile, name, getattr(original, name, None))
        torch.compile = compile

        def restore() -> None:
            if torch.__dict__.get("compile") is compile:
                torch.compile = original

        self._restore.append(restore)

    def uninstall(self) -> None:
        while self._restore:
            self._restore.pop()()

    def _say(self, code: str, message: str, step: int | None, where: SourceRef | None, detail: dict[str, Any]) -> None:
        """One finding of a compile call, on the user's line."""
        self.handler.writer.emit(FindingEvent, code=code, message=message, step=step, source=where, detail=detail)

    def note_compiled_nothing(self) -> None:
        """The findings, once per line: each `module.compile()` on a module whose forward Dynamo's
        rules skip that no compile of that forward or of Dynamo's wrapper frame followed, and each `torch.compile(...)`
        statement whose compiled module was collected (said at the end of the watch). The job's
        torch.compile calls go into the manifest (`compile_calls`)."""
        if self.calls:
            self.handler.writer.manifest.options["compile_calls"] = list(self.calls)
        by = _disabled_by()
        if (by is not None and (self.calls or self.module_calls) and self.handler.writer.manifest.mode != "eager"
                and not any(self.handler.code_compiles.values())):
            # The user's setting, not cagtool's (the eager mode's), and no frame compiled before it was set.
            first = self.calls[0] if self.calls else None
            where = (SourceRef(file=first["file"], line=first["line"], how="caller", via=first.get("via", "")) if first is not None and first["file"]
                     else self.module_calls[0].source if self.module_calls else None)
            place = "in the job's environment" if by.endswith("=1") else "by the job"
            self._say(FINDING_DYNAMO_DISABLED,
                      f"Dynamo was off ({by}, {place}): every torch.compile of the job compiled nothing and ran eagerly, as in the "
                      f"plain job with the same setting; {'unset it' if by.endswith('=1') else 'leave it unset'} to compile",
                      None, where, {"by": by, "calls": len(self.calls) + len(self.module_calls)})
        said: set[tuple[Any, ...]] = set()
        for call in self.module_calls:
            # Where Dynamo is off (the eager mode) nothing tells the rule's skip from a compile it
            # would have made: a module with forward hooks (DeepSpeed's engine registers them) has
            # its forward compiled under Module.compile() all the same. The modes that compile say it.
            if not call.skipped or _compiles_of(self.handler, call.forward_code) > call.compiles_before or _dynamo_disabled():
                continue
            key = (call.source.file, call.source.line) if call.source is not None else None, call.module
            if key in said:
                continue
            said.add(key)
            short = call.module.rsplit(".", 1)[-1]
            via = call.source.via if call.source is not None else ""
            why = (f"Module.compile() compiles the module's _call_impl, and Dynamo skips it and {short}'s forward, which are "
                   "torch's own (in its skip rules)")
            if via:
                # A library called it on the script's model (its line names the library's object, not the model).
                name = None
                message = (f"{short}.compile(), called by {via}, compiled nothing: {why}, so every call of the {short} ran "
                           f"eagerly. Give the library a model whose forward is your own (a Module subclass whose forward "
                           f"calls the {short}) (pytorch/pytorch#150915; torch 2.14 compiles it)")
            else:
                name = _called_on(call.source)
                target = name or "module"
                arguments = f", {call.arguments}" if call.arguments else ""
                message = (f"{target}.compile() compiled nothing: {why}, so every call of {target} ran eagerly. Compile the "
                           f"module object instead: {target} = torch.compile({target}{arguments}) (pytorch/pytorch#150915; "
                           "torch 2.14 compiles it)")
            self.handler.writer.emit(
                FindingEvent,
                code=FINDING_MODULE_COMPILE_SKIPPED,
                message=message,
                step=call.step,
                source=call.source,
                detail={"module": call.module, "forward": call.forward, "variable": name, "arguments": call.arguments, "via": via},
            )
        for call in self.unused:
            key = (call.source.file, call.source.line)
            # Dynamo never compiled the forward's code in the watch: no call of the compiled module ran it
            # (a first call compiles it; no cache of that code existed to hit). Unknown where Dynamo is off,
            # and where it compiled any other frame after the call (one may have inlined the forward).
            if (key in said or self.handler.code_compiles.get(call.forward_code) or _frame_compiles(self.handler) != call.frames_before
                    or _dynamo_disabled()):
                continue
            said.add(key)
            self._say(
                FINDING_COMPILED_MODULE_UNUSED,
                (
                    f"{call.kept_as} = {call.statement} compiled nothing: the job never called {call.kept_as} (Dynamo never "
                    f"compiled {call.name}'s forward), so every call of {call.name} ran it eagerly. Call the compiled module "
                    f"({call.kept_as}(...) in place of {call.name}(...)), or keep it under the module's name: "
                    f"{call.name} = {call.statement}"
                ),
                call.step, call.source,
                {"module": call.module, "variable": call.name, "kept_as": call.kept_as, "statement": call.statement},
            )
        gc_collected = [d for d in self.dropped if d.compiled() is None]
        for call in gc_collected:
            key = (call.source.file, call.source.line)
            if key in said:
                continue
            said.add(key)
            self._say(
                FINDING_COMPILED_MODULE_DROPPED,
                (
                    f"{call.statement} compiled nothing: torch.compile returns a compiled module and leaves {call.name} as it "
                    f"is, and the line drops what it returned, so every call of {call.name} ran eagerly. Keep it: "
                    f"{call.name} = {call.statement}"
                ),
                call.step, call.source,
                {"module": call.module, "variable": call.name, "statement": call.statement},
            )
