"""Module hooks a compiled forward never runs: a forward or backward hook registered on a module
inside a torch.compile'd module after Dynamo compiled that module's forward.

Dynamo does not guard on nn.Module hooks (`torch._dynamo.config.skip_nnmodule_hook_guards`, True
by default): the compiled code holds the hooks there were when it was traced, and a hook added
later changes no guard, so nothing recompiles and the compiled forward never calls it, with nothing
said (docs/torch-internals.md, "Module hooks registered after the compile"). A recompile for any
other reason traces it in from then on.

The taps call torch's `register_*_hook` first, unchanged, then look: Dynamo on, the flag True, the
module inside a compiled module (compile_calls.py keeps them) whose forward had compiled. At the end
of the watch each such registration after which that forward never compiled again is a finding on
the user's line. A failure in a tap is counted by the handler, never raised into the job."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from cagtool.capture.observe import source
from cagtool.capture.observe.dynamo_skip import as_torchs, without_dynamo
from cagtool.record.schema import FINDING_MODULE_HOOK_NOT_COMPILED, FindingEvent, SourceRef

if TYPE_CHECKING:
    from cagtool.capture.observe.compile_calls import CompileCalls
    from cagtool.capture.observe.torch_logs import StructuredLogHandler

# The registrations tapped, each a kind of hook the compiled forward holds as traced.
HOOK_METHODS = ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                "register_full_backward_pre_hook")
MAX_LATE_HOOKS = 16  # the first few say what to change; a loop registering hooks repeats one line
MAX_MODULES_WALKED = 20000  # a compiled module's submodules looked through for the hooked one


@dataclass
class LateHook:
    """One hook registered on a module of a compiled module after its forward compiled."""

    method: str  # "register_forward_hook"
    module: str  # the hooked module's class, short ("Linear")
    path: str  # its name inside the compiled module ("body.0"; "" for the compiled module itself)
    compiled: str  # the compiled module's class, short
    call: SourceRef | None  # where torch.compile compiled it
    source: SourceRef | None  # the user's line that registered the hook
    step: int | None
    code: tuple[str, int]  # the code the compiled module's calls compile (compile_calls.py)
    compiles_at: int  # compiles of that code when the hook was registered


def _guards_skipped() -> bool:
    """Dynamo on, and not guarding on module hooks (its default)."""
    config = sys.modules.get("torch._dynamo.config")
    return config is not None and not getattr(config, "disable", False) and bool(getattr(config, "skip_nnmodule_hook_guards", False))


def _names_in(root: Any) -> dict[int, str]:
    """id -> name of `root`'s modules ("" for root itself), the first MAX_MODULES_WALKED."""
    names: dict[int, str] = {}
    for i, (name, sub) in enumerate(root.named_modules()):
        if i >= MAX_MODULES_WALKED:
            break
        names.setdefault(id(sub), name)
    return names


def compiled_tree_of(compile_calls: "CompileCalls", module: Any, trees: dict[int, dict[int, str]]) -> tuple[Any, tuple[str, int], SourceRef | None, str, int] | None:
    """The compiled module `module` is in (itself, or one of its submodules), whose calls have
    compiled: (that module, its code, where it was compiled, `module`'s name in it, the compiles
    of its code so far); None where it is in none. `trees`: each compiled module's names, walked
    once, at the first registration after its forward compiled (a job registering hooks on every
    module of another model walks no tree per hook)."""
    for i, (ref, code, call) in enumerate(compile_calls.compiled_modules):
        root = ref()
        if root is None:
            continue
        compiles = compile_calls.compiles_of(code)
        if not compiles:
            continue
        names = trees.get(i)
        if names is None:
            names = trees[i] = _names_in(root)
        path = names.get(id(module))
        if path is not None:
            return root, code, call, path, compiles
    return None


class LateModuleHooks:
    """The taps on torch.nn.Module's hook registrations, and the late hooks they saw."""

    def __init__(self, handler: "StructuredLogHandler", compile_calls: "CompileCalls") -> None:
        self.handler = handler
        self.compile_calls = compile_calls
        self.late: list[LateHook] = []
        self._trees: dict[int, dict[int, str]] = {}  # compiled_tree_of's walks, by the compiled module's place in compiled_modules
        self._restore: list[Callable[[], None]] = []

    def install(self) -> None:
        import torch

        module_class = torch.nn.Module
        for method in HOOK_METHODS:
            original = module_class.__dict__.get(method)
            if callable(original):
                self._tap(module_class, method, original)

    def _tap(self, module_class: type, method: str, original: Callable[..., Any]) -> None:
        late, handler, compiled, trees = self.late, self.handler, self.compile_calls, self._trees

        def look(module: Any) -> None:
            try:
                found = compiled_tree_of(compiled, module, trees) if _guards_skipped() else None
                if found is not None:
                    root, code, call, path, compiles = found
                    late.append(LateHook(method, type(module).__name__, path, type(root).__name__, call,
                                         source.user_caller(how="caller"), handler.steps.current_step, code, compiles))
            except Exception as exc:  # noqa: BLE001 - counted, never raised into the job
                handler.errors += 1
                handler.last_error = f"{type(exc).__name__}: {exc}"

        # With Dynamo's frame callback off: a registration run eagerly inside a compiled call (the
        # rest of a forward after a graph break) offers Dynamo none of the stdlib frames the look calls.
        look = without_dynamo(look)

        def register(module: Any, *args: Any, **kwargs: Any) -> Any:
            handle = original(module, *args, **kwargs)
            # Nothing compiled yet (every hook a job registers while it builds its model): one dict read.
            if handler.code_compiles and len(late) < MAX_LATE_HOOKS:
                look(module)
            return handle

        # As torch's own function to Dynamo: a compiled forward that registers a hook traces torch's
        # registration as under plain python (its graph break included), not cagtool's skipped frame.
        tapped = as_torchs(original.__code__.co_filename, register, method, original, "self, *args, **kwargs")
        tapped.__wrapped__ = original  # type: ignore[attr-defined]
        for name in ("__doc__", "__name__", "__qualname__", "__module__"):
            setattr(tapped, name, getattr(original, name, None))
        setattr(module_class, method, tapped)

        def restore() -> None:
            if module_class.__dict__.get(method) is tapped:
                setattr(module_class, method, original)

        self._restore.append(restore)

    def uninstall(self) -> None:
        while self._restore:
            self._restore.pop()()

    def note_not_compiled(self) -> None:
        """The findings, once per line: each hook registered after its compiled module's forward
        compiled, where that forward never compiled again (a recompile would have traced it in)."""
        said: set[tuple[Any, ...]] = set()
        for hook in self.late:
            key = (hook.source.file, hook.source.line) if hook.source is not None else None, hook.method, hook.path
            if key in said or self.compile_calls.compiles_of(hook.code) > hook.compiles_at:
                continue
            said.add(key)
            target = f"`{hook.path}` ({hook.module}) of the compiled {hook.compiled}" if hook.path else f"the compiled {hook.compiled}"
            where = f" (compiled at {hook.call.file.rsplit('/', 1)[-1]}:{hook.call.line})" if hook.call is not None and hook.call.file else ""
            never = ("the hook never ran: a module's backward hook is set up by its forward call, which the compiled forward makes "
                     "as it was traced, without it" if "backward" in hook.method else "the compiled forward never ran the hook")
            self.handler.writer.emit(
                FindingEvent,
                code=FINDING_MODULE_HOOK_NOT_COMPILED,
                message=(
                    f"{hook.method}() on {target} after its forward compiled{where}: {never}. Dynamo does not guard on module hooks "
                    "(torch._dynamo.config.skip_nnmodule_hook_guards is True by default), so adding one changes nothing it "
                    "checks and nothing recompiles. Register the hook before the first compiled call, or set "
                    "torch._dynamo.config.skip_nnmodule_hook_guards = False (the hook then recompiles the forward once)"
                ),
                step=hook.step,
                source=hook.source,
                detail={"method": hook.method, "module": hook.module, "path": hook.path, "compiled": hook.compiled},
            )
