"""Fixes that need a change to the user's code, as a patch: a unified diff against the script's
own lines, and, where the edit is local and its line is found, the patched text `--verify` runs
in place of the script (never written over it: verification.py keeps it beside the re-run).

Two edits are made automatically, the mechanical ones:

`zero-grad-to-none`: .grad switching between None and a tensor, where the script clears
gradients with `zero_grad(set_to_none=False)` (the first backward sees .grad None, every later
one a zeroed tensor: AccumulateGrad's key changes once). The patch makes it `set_to_none=True`
(torch's default), so every backward sees None. The optimizer then skips no parameter that has a
gradient, so plain training gives the same numbers; the re-run's numerics check says so.

`hook-before-loop`: a backward hook registered partway through training (`if step == N: p.register_hook(h)` inside
the training loop). The patch moves the registration (never its condition) out of the loop, before it, so every
backward has the same hooks and compiled autograd captures one graph. It is applied only when
it is safe to move: the `if` has no `else`, its body is nothing but hook registrations, and none
of the names they read is assigned inside the loop (then the hook, or what it hooks, does not
exist before the loop runs). The hook then also runs on the steps before N: the re-run's
numerics check says whether that changed anything.

`hook-dynamo-disable`: a backward hook that compiled autograd traces and Dynamo recompiles (a hook
that appends to a Python list: Dynamo guards on the list's length, which grows every backward).
The patch passes `torch._dynamo.disable(hook)` in its place at the registration torch's guard
names: the same function runs, eagerly (Dynamo graph-breaks around it and installs no guard), so
the job computes what it did. Applied when that line holds one registration with the hook as
its one argument on one line, or is in the body of a hook function registered at one place, by
its name or as what a factory function returns (`p.register_hook(make_hook(name))`), and the
script does `import torch`. Not offered for a hook that recompiled once as its container filled
(explain.py `hook_filled_once`): the graph break would cost every backward.

`backend-aot-eager`: a custom autograd.Function in code the script compiles with
`torch.compile(..., backend="eager")`, which torch runs through a Function class it defines at
every call, so compiled autograd captures every backward anew (explain.py `TEMPLATE_NODE`). The
patch makes each such call's backend "aot_eager": AOTAutograd traces the Function into the compiled
forward's backward node, the same ops run, and the re-run's numerics check says whether the numbers
agree. Applied where the script's own torch.compile calls pass `backend="eager"`: as a literal, as a
name the script assigns "eager" once (that literal is edited), or as `args.X` of an argparse option
whose default is "eager" (the default is edited; not where the job's command line sets the option,
or its `choices` leave out aot_eager: the patch says to record the job again with the option set).

`eval-uncompiled`: a forward frame recompiled on the grad mode, training and an evaluation under
no_grad sharing one compiled module: the evaluation's calls of it call the module before
torch.compile (`eval_uncompiled_patch`).

The explanation's `drop_last=True` for a DataLoader's smaller last batch is verify/last_batch.py's
patch (`drop-last`), measured beside the dynamic shapes that answer the same cause.

A forward frame recompiled on a Python value (a number or a flag Dynamo specialised on) gets its
patch from value_patches.py: a number only used in tensor arithmetic is passed as a tensor at its
call site (`scalar-to-tensor`, applied), a branch on a flag argument is shown as torch.where
(`branch-to-where`, never applied). For the other causes that need a code change the edit is not
mechanical (which ops to unify): the patch says why it was not made, and the explanation's own
fix stands.
"""

from __future__ import annotations

import ast
import os
from dataclasses import replace

from cagtool.report.recompiles.explain import (
    TEMPLATE_NODE,
    CAUSE_DYNAMO_CA_GRAPH,
    CAUSE_DYNAMO_FRAME,
    CAUSE_GRAD_DEFINED,
    CAUSE_HOOK,
    CAUSE_STRUCTURE,
    Cause,
    guard_label,
    hook_filled_once,
)
from cagtool.record.schema import SourceRef
from cagtool.verify.fixes import on_a_size
from cagtool.verify.patch import Patch, imports_torch, replace_expr, unified_diff
from cagtool.verify.value_patches import value_patch
from cagtool.report.recompiles.calls import compiled_call, innermost_call
from cagtool.torch_text import GUARD_GRAD_MODE, GUARD_ID, GUARD_SIZE, GUARD_TYPE, backward_function_class

# torch's registration calls whose hook becomes part of the autograd graph compiled autograd keys on.
_HOOK_CALLS = frozenset({
    "register_hook",
    "register_post_accumulate_grad_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_backward_hook",
    "register_multi_grad_hook",
})


def _is_hook_call(node: ast.AST | None) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in _HOOK_CALLS)


def _is_hook_registration(stmt: ast.stmt) -> bool:
    return _is_hook_call(stmt.value if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) else None)


def _stored_names(loop: ast.For | ast.While) -> set[str]:
    names = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if isinstance(loop, ast.For):
        names |= {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    return names


def _loaded_names(node: ast.AST) -> set[str]:
    """The free names an expression reads (a lambda's own parameters excluded)."""
    params = {a.arg for n in ast.walk(node) if isinstance(n, ast.Lambda) for a in (*n.args.args, *n.args.kwonlyargs)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - params


def _conditional_registrations(tree: ast.AST) -> list[tuple[ast.For | ast.While, ast.If]]:
    """`if ...: <hook registrations>` statements directly inside a loop's body, with their loop."""
    found = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        for stmt in loop.body:
            if isinstance(stmt, ast.If) and any(_is_hook_registration(s) for s in stmt.body):
                found.append((loop, stmt))
    return found


def _loop_registrations(tree: ast.AST) -> list[ast.stmt]:
    """Statements of a loop's body that register a hook on every iteration (`h = m.register_hook(...)`,
    `handles.append(p.register_post_accumulate_grad_hook(...))`), a nested loop's included."""
    found = []
    for loop in ast.walk(tree):
        if isinstance(loop, (ast.For, ast.While)):
            found += [stmt for stmt in loop.body
                      if not isinstance(stmt, (ast.If, ast.For, ast.While)) and any(_is_hook_call(n) for n in ast.walk(stmt))]
    return sorted(set(found), key=lambda stmt: stmt.lineno)


_MODEL_TENSOR_ITERATORS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children"})


def _loop_over_model(tree: ast.AST, stmt: ast.stmt) -> ast.For | None:
    """The loop holding a registration when it walks a model's parameters or modules
    (`for name, p in model.named_parameters():`, under list() or enumerate() too) and is in no other
    loop of its function: a hook registered once per tensor, not on every iteration of training."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    loop = parents.get(stmt)
    if not isinstance(loop, ast.For) or _inside_another_loop(tree, loop):
        return None
    source = loop.iter
    while isinstance(source, ast.Call) and isinstance(source.func, ast.Name) and source.func.id in ("list", "enumerate") and source.args:
        source = source.args[0]
    if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) and source.func.attr in _MODEL_TENSOR_ITERATORS:
        return loop
    return None


def _registration_loop_under_if(tree: ast.AST, stmt: ast.stmt) -> tuple[ast.For | ast.While, ast.If] | None:
    """(the loop whose body holds the registration, the `if` it sits in) when that `if` is in
    another loop's body: `if step == 3: for p in params: p.register_hook(...)` in a training loop,
    hooks registered once, on several tensors, not on every iteration."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    inner = parents.get(stmt)
    branch = parents.get(inner) if isinstance(inner, (ast.For, ast.While)) else None
    outer = parents.get(branch) if isinstance(branch, ast.If) else None
    if isinstance(outer, (ast.For, ast.While)) and branch in outer.body:
        return inner, branch  # type: ignore[return-value]
    return None


def _inside_another_loop(tree: ast.AST, loop: ast.AST) -> bool:
    """Whether a loop is nested in another loop of the same function (or module body)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    node = parents.get(loop)
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            return True
        node = parents.get(node)
    return False


def _parsed(source: bytes) -> tuple[str, ast.Module] | str:
    """The script's text and syntax tree from the bytes `--verify` checked against the record's
    seal (record/seal.py `sealed_bytes`: never the path read again), or why they cannot be read."""
    try:
        text = source.decode("utf-8")
        return text, ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        return f"cannot read the script: {exc}"


def hook_patch(cause: Cause, script: str, display: str, source: bytes) -> Patch:
    """Register a mid-run hook before the training loop (see the module docstring)."""
    title = "register the hook once, before the training loop, instead of partway through it"
    parsed = _parsed(source)
    if isinstance(parsed, str):
        return Patch("hook-before-loop", (cause.number,), title, display, None, "", False, parsed)
    text, tree = parsed
    candidates = _conditional_registrations(tree)
    if not candidates:
        every = _loop_registrations(tree)
        guarded = _registration_loop_under_if(tree, every[0]) if every else None
        if guarded is not None:
            inner, branch = guarded
            return Patch("hook-before-loop", (cause.number,), title, display, every[0].lineno, "", False,
                         f"the script registers hooks in the loop at line {inner.lineno}, under the `if` at line {branch.lineno} "
                         "of its training loop: registered before the training loop by hand they would run from its first "
                         "step (a hook that changes gradients would change what the job computes); switch what the hook "
                         "does with a tensor instead, as the explanation says")
        over_model = [loop for stmt in every if (loop := _loop_over_model(tree, stmt)) is not None]
        if every and len(over_model) == len(every):
            loop = over_model[0]
            function = next((f.name for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and f.lineno <= loop.lineno <= (f.end_lineno or f.lineno)), None)
            where = f" (in `{function}`)" if function else ""
            return Patch("hook-before-loop", (cause.number,), title, display, every[0].lineno, "", False,
                         f"the script registers the hooks once per parameter or module, in the loop at line {loop.lineno}{where} "
                         "over the model's tensors, not on every iteration of training: run that registration before the "
                         "training loop by hand if the hooks may run from its first step (a hook that changes gradients "
                         "would change what the job computes)")
        if every:
            where = ", ".join(str(stmt.lineno) for stmt in every)
            return Patch("hook-before-loop", (cause.number,), title, display, every[0].lineno, "", False,
                         f"the script registers a hook inside its loop on every iteration (line{'s' if len(every) > 1 else ''} {where}): "
                         "move the registration before the loop by hand (the edit cagtool applies moves one under `if ...:` "
                         "in the loop, and a hook registered every step may be meant to see that step's values)")
        return Patch("hook-before-loop", (cause.number,), title, display, None, "", False,
                     "no hook registration inside a loop was found in the script (the hook may be registered in "
                     "another file or by a library)")
    if len(candidates) > 1:
        lines = ", ".join(str(branch.lineno) for _, branch in candidates)
        return Patch("hook-before-loop", (cause.number,), title, display, candidates[0][1].lineno, "", False,
                     f"several conditional hook registrations (lines {lines}): which one caused it is not known")
    loop, branch = candidates[0]
    lines = text.splitlines(keepends=True)
    first, last = branch.lineno, branch.end_lineno or branch.lineno
    why_not = None
    if _inside_another_loop(tree, loop):
        why_not = (f"the loop at line {loop.lineno} runs inside another loop: registered before it, the hook would be "
                   "added again on every pass of the outer loop")
    elif branch.orelse:
        why_not = f"the `if` at line {first} has an `else`: moving it would change what the other branch does"
    elif not all(_is_hook_registration(s) for s in branch.body):
        why_not = f"the `if` at line {first} does more than register hooks: only a registration can move"
    else:
        used = set().union(*(_loaded_names(s) for s in branch.body)) & _stored_names(loop)
        if used:
            why_not = (f"the hook at line {branch.body[0].lineno} uses {', '.join(f'`{n}`' for n in sorted(used))}, "
                       "assigned inside the loop: it does not exist before the loop")
    loop_indent = lines[loop.lineno - 1][: len(lines[loop.lineno - 1]) - len(lines[loop.lineno - 1].lstrip())]
    if branch.body[0].lineno == branch.lineno:
        # `if step == 2: p.register_hook(h)` on one line: only the registrations move, never the
        # condition (above the loop it would be tested once, before `step` takes its values).
        moved = [loop_indent + (ast.get_source_segment(text, stmt) or "") + "\n" for stmt in branch.body]
    else:
        body = lines[branch.body[0].lineno - 1: (branch.body[-1].end_lineno or branch.body[-1].lineno)]
        body_indent = body[0][: len(body[0]) - len(body[0].lstrip())]
        moved = [loop_indent + l[len(body_indent):] if l.startswith(body_indent) else l for l in body]
    if len(loop.body) == 1:
        why_not = why_not or "the `if` is the loop's only statement: the loop would be left empty"
    # The registration goes on the lines right above the loop, at the loop's indentation.
    start = loop.lineno - 1
    after = lines[:start] + moved + lines[start: first - 1] + lines[last:]
    diff = unified_diff(display, lines, after)
    return Patch("hook-before-loop", (cause.number,), title, display, first, diff, why_not is None, why_not,
                 patched="".join(after) if why_not is None else None)


def zero_grad_patch(cause: Cause, script: str, display: str, source: bytes) -> Patch:
    """`zero_grad(set_to_none=False)` -> `set_to_none=True` (see the module docstring)."""
    title = "clear gradients to None every step: zero_grad(set_to_none=True)"
    parsed = _parsed(source)
    if isinstance(parsed, str):
        return Patch("zero-grad-to-none", (cause.number,), title, display, None, "", False, parsed)
    text, tree = parsed
    found = [
        kw for call in ast.walk(tree)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "zero_grad"
        for kw in call.keywords
        if kw.arg == "set_to_none" and isinstance(kw.value, ast.Constant) and kw.value.value is False
    ]
    if not found:
        return Patch("zero-grad-to-none", (cause.number,), title, display, None, "", False,
                     "no zero_grad(set_to_none=False) in the script: .grad is set another way (assigned, or by a library)")
    lines = text.splitlines(keepends=True)
    after = list(lines)
    for kw in found:
        if kw.lineno != kw.end_lineno:
            return Patch("zero-grad-to-none", (cause.number,), title, display, kw.lineno, "", False,
                         f"the set_to_none argument at line {kw.lineno} spans lines: not a one-line edit")
        row = after[kw.lineno - 1]
        value = kw.value
        # Only the value changes; offsets are in UTF-8 bytes, as ast gives them.
        raw = row.encode()
        after[kw.lineno - 1] = (raw[: value.col_offset] + b"True" + raw[value.end_col_offset:]).decode()
    first = min(kw.lineno for kw in found)
    return Patch("zero-grad-to-none", (cause.number,), title, display, first, unified_diff(display, lines, after), True,
                 patched="".join(after))


def hook_disable_patch(cause: Cause, script: str, display: str, source: bytes) -> Patch:
    """Wrap a traced backward hook in torch._dynamo.disable (see the module docstring)."""
    title = "run the hook eagerly: register torch._dynamo.disable(hook), so Dynamo neither compiles nor guards it"
    name = "hook-dynamo-disable"
    parsed = _parsed(source)
    if isinstance(parsed, str):
        return Patch(name, (cause.number,), title, display, None, "", False, parsed)
    text, tree = parsed
    where = cause.source
    if cause.facts.get("ca_fullgraph"):
        return Patch(name, (cause.number,), title, display, where.line if where is not None else None, "", False,
                     "the compiled-autograd graph is compiled with fullgraph=True, where a hook under torch._dynamo.disable "
                     "is an error: keep what the hook records in a tensor, as the explanation says")
    if where is None or where.how != "guard" or os.path.realpath(where.file) != os.path.realpath(script):
        return Patch(name, (cause.number,), title, display, None, "", False,
                     "the hook's line is not in the script (it is registered in another file or by a library)")
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
             and c.func.attr in _HOOK_CALLS and c.lineno <= where.line <= (c.end_lineno or c.lineno)]
    if not calls:
        # The guard's line is in the body of a hook defined apart (`def hook(g): ...`, or one a
        # factory returns: `p.register_hook(make_hook(name))`): its registrations.
        calls = _registrations_of_hook_at(tree, where.line)
        if len(calls) > 1:
            return Patch(name, (cause.number,), title, display, where.line, "", False,
                         f"the hook at line {where.line} is registered at {len(calls)} places (lines "
                         f"{', '.join(str(c.lineno) for c in calls)}): not one edit")
    if len(calls) != 1 or len(calls[0].args) != 1 or calls[0].keywords:
        return Patch(name, (cause.number,), title, display, where.line, "", False,
                     f"line {where.line} does not hold exactly one hook registration with the hook as its one argument, "
                     "nor is it in a hook function registered by name or made by a factory function")
    hook = calls[0].args[0]
    lines = text.splitlines(keepends=True)
    if hook.lineno != hook.end_lineno:
        return Patch(name, (cause.number,), title, display, where.line, "", False,
                     f"the hook passed at line {hook.lineno} spans lines: not a one-line edit")
    after = replace_expr(lines, hook, f"torch._dynamo.disable({ast.get_source_segment(text, hook)})")
    diff = unified_diff(display, lines, after)
    if not imports_torch(tree):
        return Patch(name, (cause.number,), title, display, hook.lineno, diff, False,
                     "the script does not `import torch` at its top level: the hook's line cannot name torch._dynamo")
    return Patch(name, (cause.number,), title, display, hook.lineno, diff, True, patched="".join(after))


def _registrations_of_hook_at(tree: ast.AST, line: int) -> list[ast.Call]:
    """The hook registrations (`x.register_hook(ARG)`, one argument) of the function whose body
    holds `line`: ARG its name, or a call of the function that defines and returns it (a hook
    factory, `make_hook(name)`); [] where `line` is in no function."""
    functions = [f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and f.lineno <= line <= (f.end_lineno or f.lineno)]
    if not functions:
        return []
    hook = max(functions, key=lambda f: f.lineno)  # the innermost
    factories = {f.name for f in functions if f is not hook and hook in f.body
                 and any(isinstance(r, ast.Return) and isinstance(r.value, ast.Name) and r.value.id == hook.name for r in f.body)}
    found = []
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _HOOK_CALLS
                and len(call.args) == 1 and not call.keywords):
            continue
        arg = call.args[0]
        if (isinstance(arg, ast.Name) and arg.id == hook.name and not factories) or (
                isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id in factories):
            found.append(call)
    return sorted(found, key=lambda c: c.lineno)


def _backend_arguments(tree: ast.AST) -> list[ast.expr]:
    """The `backend=` of every `torch.compile(...)` call (also `compile` imported from torch, and the
    decorator's `@torch.compile(backend=...)`) in the script."""
    found = []
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        named = (isinstance(func, ast.Attribute) and func.attr == "compile" and isinstance(func.value, ast.Name)
                 and func.value.id == "torch") or (isinstance(func, ast.Name) and func.id == "compile")
        found += [keyword.value for keyword in call.keywords if named and keyword.arg == "backend"]
    return found


def _assigned(tree: ast.AST, name: str) -> ast.expr | None:
    """What the script's one assignment to `name` assigns (None: none, or more than one)."""
    values = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            values += [node.value for t in node.targets if isinstance(t, ast.Name) and t.id == name]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name) and node.target.id == name:
            values.append(node.value if not isinstance(node, ast.AugAssign) else None)
    return values[0] if len(values) == 1 else None


def _options(call: ast.Call, dest: str) -> list[str]:
    """The option strings of an `add_argument(...)` call whose destination is `dest` (argparse: the
    first long option, dashes made underscores, or `dest=`), the first long one first; [] for
    another argument."""
    strings = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    explicit = next((k.value.value for k in call.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)), None)
    longs = [s for s in strings if s.startswith("--")]
    named = explicit or (longs[0][2:].replace("-", "_") if longs else None)
    return [*longs, *(s for s in strings if s not in longs)] if named == dest and strings else []


def _passed(argv: list[str], options: list[str]) -> bool:
    """Whether the job's command line sets one of `options` (argparse takes a long option's unique
    prefix, and a short option's value joined to it, too)."""
    for token in argv:
        if token == "--":
            return False
        head = token.split("=", 1)[0]
        for option in options:
            long = option.startswith("--")
            if (long and token.startswith("--") and len(head) > 2 and option.startswith(head)) or (not long and token.startswith(option)):
                return True
    return False


def _eager_source(tree: ast.AST, value: ast.expr, argv: list[str], depth: int = 0) -> ast.Constant | str | None:
    """Where a `backend=` value comes from when it is "eager": the literal to edit (the value itself, a
    name's one assignment, or the default of the argparse option `args.X` reads); a string saying why
    it cannot be edited; None where it is not "eager" (or cannot be followed)."""
    if isinstance(value, ast.Constant):
        return value if value.value == "eager" else None
    if isinstance(value, ast.Name) and depth < 2:
        assigned = _assigned(tree, value.id)
        return _eager_source(tree, assigned, argv, depth + 1) if assigned is not None else None
    if not isinstance(value, ast.Attribute):
        return None
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        options = _options(call, value.attr)
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if not options or not (isinstance(default, ast.Constant) and default.value == "eager"):
            continue
        option = options[0]
        choices = next((k.value for k in call.keywords if k.arg == "choices"), None)
        if isinstance(choices, (ast.List, ast.Tuple, ast.Set)) and not any(
                isinstance(c, ast.Constant) and c.value == "aot_eager" for c in choices.elts):
            return f"the option {option} (line {call.lineno}) does not allow aot_eager among its choices: add it, then record the job with {option} aot_eager"
        if _passed(argv, options):
            return f"the job sets {option} on its command line: record it again with {option} aot_eager"
        return default
    return None


def backend_patch(cause: Cause, script: str, display: str, source: bytes, argv: list[str] | None = None) -> Patch:
    """Compile with aot_eager where the script compiles with the eager backend (see the module
    docstring); `argv`: the job's own arguments, which may set a backend option the patch would edit."""
    title = 'compile with backend="aot_eager": AOTAutograd traces the custom autograd.Function once'
    name = "backend-aot-eager"
    parsed = _parsed(source)
    if isinstance(parsed, str):
        return Patch(name, (cause.number,), title, display, None, "", False, parsed)
    text, tree = parsed
    sources = [_eager_source(tree, value, list(argv or ())) for value in _backend_arguments(tree)]
    found = list({(c.lineno, c.col_offset): c for c in sources if isinstance(c, ast.Constant)}.values())
    refused = next((why for why in sources if isinstance(why, str)), None)
    if refused is not None:
        return Patch(name, (cause.number,), title, display, None, "", False, refused)
    if not found:
        return Patch(name, (cause.number,), title, display, None, "", False,
                     'no torch.compile call in the script passes backend="eager" (as a literal, a name assigned it once, or an '
                     "argparse option's default): a library or another file compiles the code, or the value is made at run "
                     "time: change the backend there")
    lines = text.splitlines(keepends=True)
    after = list(lines)
    for constant in sorted(found, key=lambda c: (c.lineno, c.col_offset), reverse=True):
        if constant.lineno != constant.end_lineno:
            return Patch(name, (cause.number,), title, display, constant.lineno, "", False,
                         f"the backend at line {constant.lineno} spans lines: not a one-line edit")
        after = replace_expr(after, constant, '"aot_eager"')
    return Patch(name, (cause.number,), title, display, min(c.lineno for c in found), unified_diff(display, lines, after), True,
                 patched="".join(after))


# The calls that turn grad off for what they hold: a `with` item or a function's decorator
# (`torch.no_grad()`, `@torch.inference_mode()`, `torch.set_grad_enabled(False)`).
_GRAD_OFF = frozenset({"no_grad", "inference_mode"})


def _turns_grad_off(node: ast.expr) -> bool:
    call = node.func if isinstance(node, ast.Call) else node
    name = call.attr if isinstance(call, ast.Attribute) else call.id if isinstance(call, ast.Name) else ""
    if name in _GRAD_OFF:
        return True
    return (name == "set_grad_enabled" and isinstance(node, ast.Call) and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant) and node.args[0].value is False)


EVAL_UNCOMPILED = ("eval-uncompiled", "evaluate with the module as it was before torch.compile")  # (name, title)
_LIGHTNING_EVALUATION = frozenset({"validation_step", "test_step", "predict_step"})


def _compile_sites(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(names assigned a `torch.compile(...)` result, names `.compile()` is called on, functions
    decorated with `@torch.compile`), in one walk of the script's tree. Together, the names the
    script holds compiled code under (`model = torch.compile(model)`, `self.model = torch.compile(net)`,
    `model.compile()`, `@torch.compile`): which call of a line that makes several
    (`model(input_ids=batch(32))`) is the compiled one. Called `.compile()` on and never assigned a
    `torch.compile(...)` result: a module compiled in place, with no `_orig_mod`."""
    wrapped: set[str] = set()
    in_place: set[str] = set()
    decorated: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "torch.compile":
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, (ast.Name, ast.Attribute)):
                    wrapped.add(ast.unparse(target))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile" and ast.unparse(node.func.value) != "torch":
            in_place.add(ast.unparse(node.func.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                ast.unparse(d.func if isinstance(d, ast.Call) else d) == "torch.compile" for d in node.decorator_list):
            decorated.add(node.name)
    return wrapped, in_place, decorated


def _switches_to(stmt: ast.stmt) -> bool | None:
    """Where a statement switches a module to eval mode (`model.eval()`, `model.train(False)`): True;
    back to training (`model.train()`, `.train(True)`): False; else None."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute)):
        return None
    call = stmt.value
    if call.func.attr == "eval" and not call.args and not call.keywords:
        return True
    if call.func.attr == "train" and not call.keywords and len(call.args) <= 1:
        if not call.args:
            return False
        if isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, bool):
            return not call.args[0].value
    return None


def _evaluation_calls(tree: ast.AST, callee: str, eval_mode: bool = False) -> list[ast.Call]:
    """The calls of `callee` (its code: `model`, `self.net`) that the script makes with grad off:
    inside a `with torch.no_grad():` (or inference_mode, set_grad_enabled(False)), a function
    decorated with one, a function of the script's that it calls only from such places (an
    evaluation's `validation_step(x, y)` called in a no_grad loop), or a LightningModule's
    validation_step, test_step or predict_step, in the order they come. `eval_mode`: the calls made
    in eval mode instead: after a `model.eval()` statement and before the next `model.train()` of
    the same block (or one it nests), in a function called only from such places, or in a
    LightningModule's evaluation hooks (Lightning switches the module to eval() for them)."""
    defined = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # A LightningModule's evaluation hooks: Lightning runs them with grad off (torch.no_grad in fit()'s
    # validation, its sanity check's too; inference_mode in validate(), test(), predict()).
    hooks = {id(item) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             and any(ast.unparse(base).endswith("LightningModule") for base in node.bases)
             for item in node.body if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in _LIGHTNING_EVALUATION}
    off_functions: set[str] = set()  # called only with grad off: their bodies run with grad off

    def calls(off_functions: set[str]) -> list[tuple[ast.Call, bool]]:
        """Every call in the script with whether it runs with grad off."""
        found: list[tuple[ast.Call, bool]] = []

        def visit(node: ast.AST, off: bool) -> None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                off = (not eval_mode and any(_turns_grad_off(d) for d in node.decorator_list)) or node.name in off_functions or id(node) in hooks
            if not eval_mode and isinstance(node, (ast.With, ast.AsyncWith)) and any(_turns_grad_off(item.context_expr) for item in node.items):
                for item in node.items:
                    visit(item, off)
                for stmt in node.body:
                    visit(stmt, True)
                return
            if isinstance(node, ast.Call):
                found.append((node, off))
            for _, value in ast.iter_fields(node):
                if eval_mode and isinstance(value, list) and value and all(isinstance(v, ast.stmt) for v in value):
                    state = off  # a block's statements in order: `.eval()` switches the rest of it
                    for stmt in value:
                        visit(stmt, state)
                        switched = _switches_to(stmt)
                        state = state if switched is None else switched
                elif isinstance(value, list):
                    for item in value:
                        if isinstance(item, ast.AST):
                            visit(item, off)
                elif isinstance(value, ast.AST):
                    visit(value, off)

        visit(tree, False)
        return found

    for _ in range(3):  # an evaluation's helper called by a helper called under no_grad
        found = calls(off_functions)
        by_function: dict[str, set[bool]] = {}
        for call, off in found:
            name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr if (
                isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name) and call.func.value.id == "self") else None
            if name in defined:
                by_function.setdefault(name, set()).add(off)
        more = {name for name, offs in by_function.items() if offs == {True}}
        if more <= off_functions:
            break
        off_functions |= more
    return sorted((call for call, off in calls(off_functions) if off and ast.unparse(call.func) == callee),
                  key=lambda call: (call.lineno, call.col_offset))


def _module_call(cause: Cause, call: SourceRef, source: bytes) -> tuple[str, ast.Module, tuple[set[str], set[str], set[str]], tuple[str, str] | None] | str:
    """The script's text and tree, its compile sites (_compile_sites) and the compiled module's call on
    `call`'s line (its name and arguments, None where the line holds none); the parse error's words
    where the script does not parse."""
    parsed = _parsed(source)
    if isinstance(parsed, str):
        return parsed
    text, tree = parsed
    sites = _compile_sites(tree)
    wrapped, called_compile, decorated = sites
    found = compiled_call(call.code or "", cause.facts.get("argnames") or (), wrapped | called_compile | decorated) or innermost_call(call.code or "")
    return text, tree, sites, found


def eval_uncompiled_patch(cause: Cause, script: str, display: str, source: bytes) -> Patch:
    """Evaluate with the module before torch.compile: a forward frame recompiled on the grad mode
    (training's calls and an evaluation's under no_grad share the compiled module) compiles nothing
    for the evaluation where the evaluation calls `getattr(model, "_orig_mod", model)(...)`: the
    module torch.compile wrapped, eager (the same module, so the same numbers), or the module itself
    where it is no wrapper (a module compiled in place: then nothing changes, and the verdict says
    so). Every call of that module the script makes with grad off is edited, not only the one the
    record names (an evaluation before training and one after each epoch): one left compiled would
    compile the evaluation's graph all the same. Applied where the record names the evaluation's
    call, it is in the script, a plain call of a name (or one held on `self`), and runs with grad
    off by the script's own code (`_evaluation_calls`)."""
    name, title = EVAL_UNCOMPILED
    call = cause.facts.get("evaluation_call")
    if call is None and cause.facts.get("shared_call") is not None:
        return _shared_call_patch(cause, script, display, source)
    if call is None:
        return Patch(name, (cause.number,), title, display, None, "", False,
                     "the record names no one line where the evaluation called the compiled code")
    if call.via:
        return Patch(name, (cause.number,), title, display, None, "", False,
                     f"the evaluation calls the compiled code in a library's code ({call.via}, reached from "
                     f"{os.path.basename(call.file)}:{call.line}): no call of the script's to edit")
    if os.path.realpath(call.file) != os.path.realpath(script):
        return Patch(name, (cause.number,), title, display, None, "", False,
                     f"the evaluation calls the compiled code in {os.path.basename(call.file)}, not in the script: edit that call there")
    read = _module_call(cause, call, source)
    if isinstance(read, str):
        return Patch(name, (cause.number,), title, display, None, "", False, read)
    text, tree, (wrapped, called_compile, _), found = read
    if found is None:
        return Patch(name, (cause.number,), title, display, call.line, "", False,
                     f"line {call.line} holds no call of a module by its name (`model(x)`, `self.net(x)`)")
    callee = found[0]
    eval_mode = bool(cause.facts.get("train_eval"))
    calls = _evaluation_calls(tree, callee, eval_mode=eval_mode)
    if not any(c.func.lineno == call.line for c in calls):
        where = ("after no `.eval()` of its block (nor in a function called only from such places) in the script" if eval_mode else
                 "in no `with torch.no_grad():` block (or inference_mode) nor a function decorated with one in the script")
        return Patch(name, (cause.number,), title, display, call.line, "", False,
                     f"the evaluation's call at line {call.line} is {where}: its other calls cannot be told from training's")
    if any(c.func.lineno != c.func.end_lineno for c in calls):
        return Patch(name, (cause.number,), title, display, call.line, "", False, f"a call of `{callee}` spans lines: not a one-line edit")
    lines = text.splitlines(keepends=True)
    # A module compiled in place (`model.compile()`: the record's compile call, or the script's text)
    # has no `_orig_mod`: its evaluation's calls run under set_stance("force_eager") as a decorator,
    # which restores the stance when the call returns.
    by = cause.facts.get("compiled_by")
    in_place = (bool(isinstance(by, dict) and by.get("in_place")) or callee in called_compile - wrapped) and imports_torch(tree)
    if in_place:
        title = 'run the evaluation eagerly (torch.compiler.set_stance("force_eager"))'
    # DDP(torch.compile(model)) is called as `model`: the compiled module is its `.module` (SourceRef.wrapper)
    held = f"{callee}.module" if call.wrapper else callee
    for quote in ('"', "'"):  # the other quote where a call sits in an f-string of the first (Python 3.11)
        after = list(lines)
        for c in sorted(calls, key=lambda c: (c.func.lineno, c.func.col_offset), reverse=True):
            after = replace_expr(after, c.func, f"torch.compiler.set_stance({quote}force_eager{quote})({callee})" if in_place else
                                 f"getattr({held}, {quote}_orig_mod{quote}, {held})")
        try:
            ast.parse("".join(after))
        except SyntaxError:
            continue
        return Patch(name, (cause.number,), title, display, calls[0].lineno, unified_diff(display, lines, after), True,
                     patched="".join(after), edited=tuple(sorted({c.func.lineno for c in calls})))
    return Patch(name, (cause.number,), title, display, call.line, "", False,
                 f"the edited calls of `{callee}` do not parse (inside f-strings of both quotes): edit them by hand")


def _shared_call_patch(cause: Cause, script: str, display: str, source: bytes) -> Patch:
    """eval-uncompiled where training and the evaluation call the compiled module from one line
    (explain.py `shared_call`: a forward both go through, as a LightningModule's): that call picks
    by the state the guard is on, `(self.net(x) if torch.is_grad_enabled() else
    getattr(self.net, "_orig_mod", self.net)(x))` (the module's `training` flag for a train/eval
    cause), so the evaluation runs the module before torch.compile and training its compiled graph.
    Applied where the line is the script's, holds one plain call of the compiled module on one line,
    and the script imports torch."""
    name, title = EVAL_UNCOMPILED
    call = cause.facts["shared_call"]
    if call.via or os.path.realpath(call.file) != os.path.realpath(script):
        return Patch(name, (cause.number,), title, display, None, "", False,
                     f"training and the evaluation call the compiled code from one line, in {os.path.basename(call.file)}"
                     f"{f' ({call.via})' if call.via else ''}, not in the script: no call of the script's to edit")
    read = _module_call(cause, call, source)
    if isinstance(read, str):
        return Patch(name, (cause.number,), title, display, None, "", False, read)
    text, tree, _, found = read
    callee = found[0] if found is not None else ""
    lines = text.splitlines(keepends=True)
    nodes = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and node.lineno == call.line
             and node.end_lineno == call.line and ast.unparse(node.func) == callee]
    if len(nodes) != 1 or not imports_torch(tree):
        return Patch(name, (cause.number,), title, display, call.line, "", False,
                     f"line {call.line}, where training and the evaluation both call the compiled code, holds no one call of a "
                     "module by its name on one line in a script that imports torch: pick there by the grad mode by hand")
    node = nodes[0]
    segment = ast.get_source_segment(text, node) or ""
    if not segment.startswith(callee):
        return Patch(name, (cause.number,), title, display, call.line, "", False,
                     f"the call of `{callee}` at line {call.line} is not written as its name: pick there by the grad mode by hand")
    state = f"{callee}.training" if cause.facts.get("train_eval") else "torch.is_grad_enabled()"
    for quote in ('"', "'"):
        held = f"{callee}.module" if call.wrapper else callee  # DDP(torch.compile(model)): SourceRef.wrapper
        uncompiled = f"getattr({held}, {quote}_orig_mod{quote}, {held}){segment[len(callee):]}"
        after = replace_expr(list(lines), node, f"({segment} if {state} else {uncompiled})")
        try:
            ast.parse("".join(after))
        except SyntaxError:
            continue
        return Patch(name, (cause.number,), title, display, call.line, unified_diff(display, lines, after), True,
                     patched="".join(after), edited=(call.line,))
    return Patch(name, (cause.number,), title, display, call.line, "", False,
                 f"the edited call of `{callee}` does not parse (inside f-strings of both quotes): edit it by hand")


def with_evaluations_recompiles(patch: Patch, causes: list[Cause], script: str) -> Patch:
    """eval-uncompiled answers, besides the grad mode's cause, every other cause of a forward frame
    whose recompiles were all compiled with grad off at a call it edits: an evaluation's last
    batch (Lightning's sanity check, 16 rows then 14) is compiled no more once the evaluation runs
    uncompiled, and the verdict then judges that cause too ("a cause it answers is still there")."""
    if patch.name != EVAL_UNCOMPILED[0] or not patch.applicable:
        return patch
    more = []
    for cause in causes:
        ids = set(cause.facts.get("evaluation_ids") or ())
        off = cause.between_steps or (bool(cause.rows) and all(row.compile_id in ids for row in cause.rows))
        if (cause.number not in patch.causes and cause.code == CAUSE_DYNAMO_FRAME and cause.caused_by is None and off
                and all(row.caller is not None and row.caller.line in patch.edited
                        and os.path.realpath(row.caller.file) == os.path.realpath(script) for row in cause.rows)):
            more.append(cause.number)
    return replace(patch, causes=tuple(sorted((*patch.causes, *more)))) if more else patch


def _template_cause(cause: Cause) -> bool:
    """A cause whose class is the one torch defines at every call of code compiled without AOTAutograd."""
    found = cause.facts.get("function_class")
    if cause.code == CAUSE_STRUCTURE:
        return found is not None and found.name == TEMPLATE_NODE
    return cause.code == CAUSE_DYNAMO_CA_GRAPH and backward_function_class(cause.facts.get("guard") or "") == TEMPLATE_NODE


_NOT_A_SCRIPT = "the job is not a script file cagtool can read (a module, or it moved)"

_NOT_MECHANICAL = {
    CAUSE_STRUCTURE: "which ops to unify (a branch or a loop per step) is a design choice: no edit is made",
    CAUSE_GRAD_DEFINED: _NOT_A_SCRIPT,
    CAUSE_DYNAMO_FRAME: "no failing guard recorded is on a Python value (it is on a tensor's size, an object's id or type): no local edit "
                        "makes it hold",
}


def patch_for(cause: Cause, script: str | None, display: str | None, source: bytes | None, argv: list[str] | None = None) -> Patch | None:
    """The patch for a cause that needs a code change; None for a cause a configuration answers.
    `source`: the script's bytes as checked against the record's seal (None for a module job);
    `argv`: the job's arguments after the script."""
    if cause.caused_by is not None:
        return None  # fixed with the cause it follows from
    if _template_cause(cause):
        if script is None or source is None:
            return Patch("backend-aot-eager", (cause.number,), 'compile with backend="aot_eager"', display or "?", None, "", False,
                         _NOT_A_SCRIPT)
        return backend_patch(cause, script, display or script, source, argv)
    if cause.code == CAUSE_DYNAMO_CA_GRAPH and cause.facts.get("hook"):
        if hook_filled_once(cause.facts):
            return None  # one recompile, cached: running the hook eagerly costs a graph break every backward (explain.py)
        if script is None or source is None:
            return Patch("hook-dynamo-disable", (cause.number,), "run the hook eagerly", display or "?", None, "", False,
                         _NOT_A_SCRIPT)
        return hook_disable_patch(cause, script, display or script, source)
    if cause.code == CAUSE_HOOK:
        if script is None or source is None:
            return Patch("hook-before-loop", (cause.number,), "register the hook once, before the training loop", display or "?",
                         None, "", False, _NOT_A_SCRIPT)
        return hook_patch(cause, script, display or script, source)
    if cause.code == CAUSE_GRAD_DEFINED and script is not None and source is not None:
        return zero_grad_patch(cause, script, display or script, source)
    if cause.code == CAUSE_DYNAMO_FRAME and not cause.facts.get("reentrant_recompute") and (
            cause.facts.get("kind") == GUARD_GRAD_MODE or (cause.facts.get("train_eval") and not cause.facts.get("backward_through"))):
        if script is None or source is None:
            return Patch(EVAL_UNCOMPILED[0], (cause.number,), EVAL_UNCOMPILED[1], display or "?", None, "", False, _NOT_A_SCRIPT)
        return eval_uncompiled_patch(cause, script, display or script, source)
    if cause.code == CAUSE_DYNAMO_FRAME:
        patch = value_patch(cause, script, display, source)
        if patch is not None:
            return patch
        if on_a_size(cause):
            return None  # a tensor's size: dynamic shapes answer it (fixes.py), no edit of the script
    why = _NOT_MECHANICAL.get(cause.code)
    if cause.code == CAUSE_DYNAMO_FRAME and cause.facts.get("kind") not in (None, "", GUARD_SIZE, GUARD_ID, GUARD_TYPE):
        # Said from the guard's class (torch's reason), never as "a size, an id or a type".
        why = f"no local edit: {guard_label(cause.facts)}, not a Python value passed in; the explanation says what to do"
    if why is None:
        return None
    return Patch(f"{cause.code}-edit", (cause.number,), "change the code as the explanation's fix says", display or "?", None, "", False, why)
