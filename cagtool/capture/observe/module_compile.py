"""`module.compile()` that compiled nothing: the module's calls ran eagerly while the script asked
for torch.compile.

`Module.compile()` sets the module's `_compiled_call_impl` to `torch.compile(self._call_impl)`.
torch 2.13's Dynamo skips `_call_impl` (torch/nn/modules/module.py is in its skip rules) and, where
the module's forward is torch's own too (nn.Sequential, nn.Linear: also skipped), no frame is left
to compile: every call runs eagerly, with nothing said unless Dynamo's debug log is on
(pytorch/pytorch#150915; docs/torch-internals.md, "Module.compile() on a module of torch's own").
`torch.compile(module)` wraps such a forward and compiles it, and so does torch 2.14's
Module.compile(). A forward of the script's own is compiled under `module.compile()` as under
`torch.compile(module)`.

The tap calls torch's `Module.compile` first, unchanged, then notes the call: the module's class,
whether Dynamo's rules skip its forward, the user's line, and how many of Dynamo's wrapper frames
(`StructuredLogHandler.wrapper_compiles`: `wrap_inline`'s `inner`, the one frame through which such
a module is compiled, by torch.compile(module) and by a torch whose Module.compile() wraps it too)
Dynamo had compiled by then. At the end of the watch (`note_compiled_nothing`), a call on a module
with a skipped forward after which Dynamo compiled no wrapper frame is said as a finding, once per
line: other frames of the job compiled meanwhile (a torch.compile'd loss) do not compile it.
A failure in the tap is counted by the handler, never raised into the job."""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from cagtool.capture.observe import source
from cagtool.record.schema import FINDING_MODULE_COMPILE_SKIPPED, FindingEvent, SourceRef

if TYPE_CHECKING:
    from cagtool.capture.observe.torch_logs import StructuredLogHandler

# `model.compile(` / `self.encoder.compile(` on the script's line: the name the fix compiles.
_CALLED_ON = re.compile(r"([A-Za-z_][\w.]*)\s*\.\s*compile\s*\(")
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
    wrappers_before: int  # Dynamo's wrapper frames compiled before the call
    arguments: str  # the call's arguments, for the fix ("backend='aot_eager'"), "..." where not plain


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if any(not isinstance(v, _PLAIN) for v in (*args, *kwargs.values())):
        return "..."
    return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def _called_on(where: SourceRef | None) -> str | None:
    """The name the user's line calls `.compile()` on (`model`, `self.encoder`), where one is."""
    if where is None or not where.file or not where.line:
        return None
    found = _CALLED_ON.findall(linecache.getline(where.file, where.line))
    return found[0] if len(found) == 1 else None


class ModuleCompiles:
    """The tap on torch.nn.Module.compile and the calls it saw."""

    def __init__(self, handler: "StructuredLogHandler") -> None:
        self.handler = handler
        self.calls: list[ModuleCompile] = []
        self._uninstall: Callable[[], None] | None = None

    def install(self) -> None:
        import torch

        module_class = torch.nn.Module
        original = module_class.__dict__.get("compile")
        if not callable(original):
            return  # a torch without Module.compile: nothing to watch
        calls, handler = self.calls, self.handler

        def compile(module: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's name
            wrappers = handler.wrapper_compiles
            result = original(module, *args, **kwargs)
            try:
                from torch._dynamo import trace_rules

                cls = type(module)
                forward = getattr(cls, "forward", None)
                calls.append(ModuleCompile(
                    module=f"{cls.__module__}.{cls.__qualname__}",
                    forward=f"{getattr(forward, '__module__', '?')}.{getattr(forward, '__qualname__', 'forward')}",
                    skipped=bool(forward is not None and trace_rules.check(forward)),
                    source=source.user_caller(how="caller"),
                    step=handler.steps.current_step,
                    wrappers_before=wrappers,
                    arguments=_arguments(args, kwargs),
                ))
            except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
                handler.errors += 1
                handler.last_error = f"{type(exc).__name__}: {exc}"
            return result

        compile.__wrapped__ = original  # type: ignore[attr-defined]
        compile.__doc__ = original.__doc__
        compile.__name__ = compile.__qualname__ = "compile"
        module_class.compile = compile  # type: ignore[method-assign]

        def uninstall() -> None:
            if module_class.__dict__.get("compile") is compile:
                module_class.compile = original  # type: ignore[method-assign]

        self._uninstall = uninstall

    def uninstall(self) -> None:
        if self._uninstall is not None:
            self._uninstall()
            self._uninstall = None

    def note_compiled_nothing(self) -> None:
        """The finding for each line whose `module.compile()`, on a module whose forward Dynamo's
        rules skip, was followed by no compile of Dynamo's wrapper frame (said at the end of the watch)."""
        said: set[tuple[Any, ...]] = set()
        for call in self.calls:
            if not call.skipped or self.handler.wrapper_compiles > call.wrappers_before:
                continue
            key = (call.source.file, call.source.line) if call.source is not None else None, call.module
            if key in said:
                continue
            said.add(key)
            name = _called_on(call.source)
            short = call.module.rsplit(".", 1)[-1]
            target = name or "module"
            arguments = f", {call.arguments}" if call.arguments else ""
            self.handler.writer.emit(
                FindingEvent,
                code=FINDING_MODULE_COMPILE_SKIPPED,
                message=(
                    f"{target}.compile() compiled nothing: Module.compile() compiles the module's _call_impl, and Dynamo "
                    f"skips it and {short}'s forward, which are torch's own (in its skip rules), so every call of "
                    f"{target} ran eagerly. Compile the module object instead: "
                    f"{target} = torch.compile({target}{arguments}) (pytorch/pytorch#150915; torch 2.14 compiles it)"
                ),
                step=call.step,
                source=call.source,
                detail={"module": call.module, "forward": call.forward, "variable": name, "arguments": call.arguments},
            )
