"""Patches for a Dynamo guard on a Python value: a forward frame recompiled because a Python number
or flag it specialised on changed (torch's guard text `scale == 1.0`, `flag == True`,
`self.use_relu == True`, `G['FLAG'] == True`: torch_text.value_guard).

`scalar-to-tensor`: a Python number passed to the compiled function and only used there in tensor
arithmetic (`self.linear(x) * scale`) is passed as a tensor instead, at the call site Dynamo
recorded (`model(x, torch.tensor(scale, dtype=torch.get_default_dtype()))` for a float,
`torch.tensor(n)`, an int64, for an int). A tensor's value is not guarded on, so one graph serves
every value. The dtype is the one type promotion gives a Python float beside a tensor with no
floating dtype (an integer tensor: torch's default dtype), read when the call runs, so a script that
sets another default gets it: beside a 0-dim float32 tensor (`loss * scale`), an integer tensor or a
dimensioned floating tensor of at most the default's precision, the tensor gives the result the
dtype and the bits the Python float gave (a float64 tensor would make `loss * scale` float64, its
losses different in the 8th digit). Left to the re-run's numerics check: a float64 tensor under a
float32 default (the number is rounded to float32 first); a 0-dim tensor of another floating dtype
than the default (the result takes the wider: a float16 `loss * scale` becomes float32, a float32
one float64 under a float64 default); `scale * h` with `h` in half precision (a 0-dim tensor on the
left is rounded to half before the product, a Python float is kept in float). It is made, on a copy,
only when the edit is local and keeps what the code computes: the guarded value is a parameter of
the compiled function (in the script), never reassigned there, and every use of it is an operand of
`+ - * /` beside an operand that is neither a constant nor visibly a Python number (`x.size(0)`,
`x.shape[1]`, `len(...)`, `math.*`), and not the dividend of `/` (torch computes `scale / y` for a
Python number as `y.reciprocal() * scale`, for a tensor as a division: the last bits differ), whose
result goes to a return, an assignment, a `torch.*` function's argument, or has a method called on
it; the call site's line has exactly one call that passes that parameter, without
`*args`/`**kwargs` (a call of a `torch.*` function on that line is never the compiled one; of
several others, the one by the compiled function's name is); and the script imports `torch` under that name. Anything else (a loop bound, an
`if`, `range(n)`, a shape) is not patched and the reason names the line. The re-run's numerics check
confirms the rest.

`branch-to-where`: an `if` on a Python flag guarded on. When the flag is an argument and each
branch assigns one name (`if flag: y = A` / `else: y = B`, or no `else`: y is kept), the suggested
change is `y = torch.where(flag, A, B)` with the flag passed as a tensor. It is shown, never
applied: torch.where computes both sides on every call and needs both to be tensors that
broadcast, which the source does not say. A bool costs at most one recompile per value (Dynamo
keeps both graphs), so keeping the flag fixed during training is often the better change.
"""

from __future__ import annotations

import ast
import os

from cagtool.record.schema import SourceRef
from cagtool.report.recompiles.explain import Cause
from cagtool.report.recompiles.table import guard_text
from cagtool.torch_text import value_guard
from cagtool.verify.patch import YOUR_CODE, Patch, imports_torch, replace_expr, unified_diff

SCALAR = "scalar-to-tensor"
BRANCH = "branch-to-where"

_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _function_at(tree: ast.Module, line: int, name: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool] | None:
    """The innermost `def name` whose body holds `line`, and whether it is a method (its first
    parameter is bound by the call: `model(x, s)` calls `forward(self, x, s)`)."""
    found = None
    for parent in ast.walk(tree):
        for node in ast.iter_child_nodes(parent):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
                    and node.lineno <= line <= (node.end_lineno or node.lineno)):
                if found is None or node.lineno >= found[0].lineno:
                    found = (node, isinstance(parent, ast.ClassDef))
    return found


def _parents(root: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def _constant_only(node: ast.AST) -> bool:
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)) for n in ast.walk(node))


def _snippet(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Calls and attributes whose value is a Python number even on a tensor (`x.size(0)`, `x.shape[1]`).
_NUMBER_CALLS = frozenset({"size", "numel", "dim", "item", "len", "int", "float", "round", "stride", "nelement", "tolist"})
_NUMBER_ATTRIBUTES = frozenset({"shape", "ndim"})


def _python_number(node: ast.AST) -> str | None:
    """The part of an operand that is a Python number even when it is read from a tensor; None if none is seen."""
    for part in ast.walk(node):
        called = part.func if isinstance(part, ast.Call) else None
        called_name = called.attr if isinstance(called, ast.Attribute) else called.id if isinstance(called, ast.Name) else None
        if called_name in _NUMBER_CALLS or (isinstance(part, ast.Attribute) and part.attr in _NUMBER_ATTRIBUTES) or (
                isinstance(part, ast.Name) and part.id == "math"):
            return _snippet(part)
    return None


def _is_torch_function(func: ast.expr) -> bool:
    """`torch.sigmoid`, `torch.nn.functional.relu`: a function of the torch module, which takes a tensor where it takes a number."""
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and func.id == "torch"


def _callee_name(func: ast.expr) -> str | None:
    """`loss_fn` for `loss_fn(...)` and `self.loss_fn(...)`; None for any other callee."""
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _non_tensor_use(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> str | None:
    """Why passing `name` as a 0-dim tensor could change what `func` does; None when every use is
    tensor arithmetic (the module docstring's rule)."""
    parents = _parents(func)
    for node in ast.walk(func):
        if isinstance(node, ast.arg) and node.arg == name and parents.get(node) is not func.args:
            return f"`{name}` is also a parameter of a nested function at line {node.lineno}"
    uses = sorted((n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name), key=lambda n: (n.lineno, n.col_offset))
    if not uses:
        return f"`{name}` is not read in `{func.name}` itself (a nested function or another frame reads it)"
    for use in uses:
        where = f"line {use.lineno}"
        if not isinstance(use.ctx, ast.Load):
            return f"`{name}` is assigned at {where}: the tensor would not reach every use"
        scope = parents.get(use)
        while scope is not None and scope is not func and not isinstance(scope, _SCOPES):
            scope = parents.get(scope)
        if scope is not func:
            return f"`{name}` is read inside a nested function or lambda at {where}"
        parent = parents[use]
        if not (isinstance(parent, ast.BinOp) and isinstance(parent.op, _ARITHMETIC)):
            return f"`{name}` is used at {where} in `{_snippet(parent)}`, not in tensor arithmetic: a tensor there changes what the code does"
        other = parent.right if parent.left is use else parent.left
        if isinstance(parent.op, ast.Div) and parent.left is use:
            return (f"`{name}` is divided by `{_snippet(other)}` at {where}: torch computes a Python number over a tensor as "
                    "the tensor's reciprocal times the number, a tensor over a tensor as a division, whose last bits differ")
        if _constant_only(other):
            return (f"`{name}` is combined only with a constant at {where} (`{_snippet(parent)}`): the result would be a tensor "
                    "where the code computes a Python number")
        top = parent
        while isinstance(parents.get(top), ast.BinOp) and isinstance(parents[top].op, _ARITHMETIC) or (
                isinstance(parents.get(top), ast.UnaryOp) and isinstance(parents[top].op, (ast.USub, ast.UAdd))):
            top = parents[top]
        context = parents.get(top)
        number = _python_number(other)
        if number is not None:
            return (f"`{name}` is combined at {where} with `{number}`, a Python number: the result would be a tensor where the "
                    "code computes a number")
        fine = (isinstance(context, ast.Return)
                or (isinstance(context, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and context.value is top)
                or (isinstance(context, ast.Call) and top in context.args and _is_torch_function(context.func))
                or (isinstance(context, ast.Attribute) and context.value is top))
        if not fine:
            return (f"the arithmetic on `{name}` at {where} feeds `{_snippet(context) if context is not None else '?'}`, "
                    "not a return, an assignment or a tensor call: a tensor there may change what the code does")
    return None


def _argument_at(tree: ast.Module, line: int, func: ast.FunctionDef | ast.AsyncFunctionDef, method: bool, name: str) -> tuple[ast.expr | None, str]:
    """The expression the call on `line` passes for parameter `name`; (None, why) when there is not
    exactly one such call."""
    positional = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if method:
        positional = positional[1:]
    index = positional.index(name) if name in positional else None
    keyword_ok = name not in {a.arg for a in func.args.posonlyargs}
    calls: list[tuple[ast.Call, ast.expr]] = []
    unresolved = False
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call) or not (call.lineno <= line <= (call.end_lineno or call.lineno)):
            continue
        by_name = [kw.value for kw in call.keywords if kw.arg == name] if keyword_ok else []
        if by_name:
            calls.append((call, by_name[0]))
        elif index is not None and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]) and len(call.args) > index:
            calls.append((call, call.args[index]))
        elif any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
            unresolved = True
    if len(calls) > 1:
        # `loss_fn(torch.randn(4, 8), scale)`: a torch function is never the script's compiled one,
        # and of the rest, a call by the compiled function's own name is the one.
        calls = [(c, e) for c, e in calls if not _is_torch_function(c.func)] or calls
        named = [(c, e) for c, e in calls if _callee_name(c.func) == func.name]
        calls = named if len(named) == 1 else calls
    found = [expr for _, expr in calls]
    if unresolved and not found:
        return None, f"the call at line {line} passes `*args` or `**kwargs`: which expression becomes `{name}` is not in the source"
    if len(found) != 1:
        return None, (f"no call at line {line} passes `{name}`" if not found
                      else f"{len(found)} calls at line {line} could pass `{name}`: which one is the compiled function's is not known")
    if found[0].lineno != found[0].end_lineno:
        return None, f"the argument passed for `{name}` at line {line} spans lines: not a one-line edit"
    return found[0], ""


def _guarded(cause: Cause) -> tuple[list[tuple[str, str, str]], SourceRef | None, SourceRef | None]:
    """The value guards that failed (scope, name, value), the user line that installed the guard,
    and the line that called the compiled code."""
    guards: list[tuple[str, str, str]] = []
    at = caller = None
    for row in cause.rows:
        parsed = value_guard(guard_text(row.messages[0])) if row.messages else None
        if parsed is None:
            continue
        if parsed[:2] not in [g[:2] for g in guards]:
            guards.append(parsed)
        if at is None and row.user_source is not None and row.user_source.how == "guard":
            at = row.user_source
        caller = caller or row.caller
    return guards, at, caller


def value_patch(cause: Cause, script: str | None, display: str | None, source: bytes | None) -> Patch | None:
    """The patch for a forward frame recompiled on a Python value; None when no failing guard of
    the cause is on a Python value (a tensor's size, an object's id: patches.py says why not).
    `source`: the script's bytes as checked against the record's seal."""
    guards, at, caller = _guarded(cause)
    if not guards:
        return None
    display = display or script or "?"
    scope, name, value = guards[0]
    branch = value in ("True", "False")
    patch_name = BRANCH if branch else SCALAR
    # The dtype type promotion gives the Python number where no tensor beside it sets one (the
    # module docstring): a float the default dtype, read when the call runs; an int an int64.
    as_float = not branch and any(c in value for c in ".eEn")
    wrap = "torch.tensor({}, dtype=torch.get_default_dtype())" if as_float else "torch.tensor({})"
    title = (f"choose with torch.where instead of branching on `{name}`" if branch
             else f"pass `{name}` as a tensor where it is passed in: {wrap.format(name)}")

    def why_not(why: str, line: int | None = None, diff: str = "") -> Patch:
        return Patch(patch_name, (cause.number,), title, display, line, diff, False, why, who=YOUR_CODE)

    if len(guards) > 1:
        names = ", ".join(f"`{n}`" for _, n, _ in guards)
        return why_not(f"guards on several Python values failed ({names}): one edit per value, which cagtool does not combine")
    if script is None or source is None:
        return why_not("the job is not a script file cagtool can read (a module, or it moved)")
    if at is None or not _same_file(at.file, script):
        return why_not(f"the guard on `{name}` was installed in {at.file if at else 'a frame torch did not name'}, "
                       "not in the script: the edit would be in another file")
    try:
        text = source.decode("utf-8")
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        return why_not(f"cannot read the script: {exc}")
    located = _function_at(tree, at.line, at.function)
    if located is None:
        return why_not(f"no `def {at.function}` holding line {at.line} in the script", at.line)
    func, method = located
    lines = text.splitlines(keepends=True)
    if scope != "local":
        kind = "a module attribute" if scope == "attribute" else "a global"
        return why_not(f"`{name}` is {kind} read inside the compiled code, not an argument: no call site passes it, so no local edit "
                       "makes it a tensor; keep it fixed once training starts (Dynamo keeps one graph per value it saw)", at.line)
    params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
    if name not in params:
        return why_not(f"`{name}` is computed inside `{func.name}`, not passed in: no call site to pass a tensor", at.line)
    if branch:
        return _branch_patch(cause, tree, lines, func, method, name, at, caller, script, display, title)
    reason = _non_tensor_use(func, name)
    if reason is not None:
        return why_not(reason, at.line)
    if caller is None or not _same_file(caller.file, script):
        return why_not(f"the line that calls `{func.name}` is not in the script (or was not recorded): no call site to edit", at.line)
    argument, reason = _argument_at(tree, caller.line, func, method, name)
    if argument is None:
        return why_not(reason, caller.line)
    after = replace_expr(lines, argument, wrap.format(ast.get_source_segment(text, argument)))
    diff = unified_diff(display, lines, after)
    if not imports_torch(tree):
        return why_not("the script does not `import torch` at its top level: the call site cannot name torch.tensor", caller.line, diff)
    return Patch(SCALAR, (cause.number, *cause.consequences), title, display, caller.line, diff, True, who=YOUR_CODE, patched="".join(after))


def _branch_patch(cause: Cause, tree: ast.Module, lines: list[str], func: ast.FunctionDef | ast.AsyncFunctionDef, method: bool,
                  name: str, at: SourceRef, caller: SourceRef | None, script: str, display: str, title: str) -> Patch:
    """`if flag: y = A [else: y = B]` -> `y = torch.where(flag, A, B)`, with the flag passed as a
    tensor: shown, never applied (see the module docstring)."""
    def shown(why: str, line: int | None, diff: str = "") -> Patch:
        return Patch(BRANCH, (cause.number,), title, display, line, diff, False, why, who=YOUR_CODE)

    branch = next((n for n in ast.walk(func) if isinstance(n, ast.If) and n.lineno == at.line), None)
    if branch is None:
        return shown(f"`{name}` is guarded at line {at.line}, which is not an `if`: no branch to rewrite", at.line)
    if lines[branch.lineno - 1].lstrip().startswith("elif"):
        return shown(f"the branch at line {at.line} is an `elif`: its choice depends on the tests before it, not on `{name}` alone",
                     at.line)
    negated = isinstance(branch.test, ast.UnaryOp) and isinstance(branch.test.op, ast.Not)
    tested = branch.test.operand if negated else branch.test
    if not (isinstance(tested, ast.Name) and tested.id == name):
        return shown(f"the `if` at line {at.line} tests `{_snippet(branch.test)}`, not `{name}` alone: no mechanical rewrite", at.line)
    chosen = [branch.body, branch.orelse]
    simple = all(len(part) == 1 and isinstance(part[0], ast.Assign) and len(part[0].targets) == 1
                 and isinstance(part[0].targets[0], ast.Name) for part in chosen if part) and len(branch.body) == 1
    targets = {part[0].targets[0].id for part in chosen if part and simple}
    if not simple or len(targets) != 1 or any(p[0].lineno != p[0].end_lineno for p in chosen if p):
        return shown(f"the `if` at line {at.line} does more than assign one name on one line in each branch: torch.where "
                     "can only replace a choice between two values", at.line)
    target = targets.pop()
    text = "".join(lines)
    sides = [ast.get_source_segment(text, part[0].value) if part else target for part in chosen]
    if negated:
        sides.reverse()
    indent = lines[branch.lineno - 1][: len(lines[branch.lineno - 1]) - len(lines[branch.lineno - 1].lstrip())]
    end = branch.end_lineno or branch.lineno
    argument = None
    if caller is not None and _same_file(caller.file, script) and not branch.lineno <= caller.line <= end:
        argument = _argument_at(tree, caller.line, func, method, name)[0]
    # The call site first: a one-line edit, so the branch's line numbers still hold after it.
    base = replace_expr(lines, argument, f"torch.tensor({ast.get_source_segment(text, argument)})") if argument is not None else lines
    after = base[: branch.lineno - 1] + [f"{indent}{target} = torch.where({name}, {sides[0]}, {sides[1]})\n"] + base[end:]
    first = min(branch.lineno, caller.line) if argument is not None and caller is not None else branch.lineno
    also = "" if argument is not None else "; the call site was not found, and it must pass the flag as a tensor (torch.tensor(...)) too"
    why = ("torch.where computes both sides on every call and needs both to be tensors that broadcast to one shape, which "
           f"the source does not say; a bool flag recompiles at most once per value (Dynamo keeps both graphs){also}")
    return shown(why, first, unified_diff(display, lines, after))
