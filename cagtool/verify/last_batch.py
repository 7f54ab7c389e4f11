"""`drop-last`: the explanation's fix for a recompile on a smaller last batch, as a patch.

A DataLoader whose dataset size is not a multiple of its batch size ends each epoch with a smaller
batch: Dynamo recompiles the forward for it and compiled autograd captures the backward again
(explain.py: "If it is a DataLoader's last batch: DataLoader(..., drop_last=True) drops it"). The
patch adds `drop_last=True` to the training DataLoader's call (or `dataloader_drop_last=True` to
an HF Trainer's `TrainingArguments(...)`), and `--verify` runs the copy as one more fix beside the
run settings that answer the same cause (dynamic shapes), so the user sees both measured.

The training loader is the script's one `DataLoader(...)` call without drop_last, or among several
the one assigned to a name with "train" in it, else the one with `shuffle=True`: an evaluation's
loader keeps its last batch (its samples count in the metric). Not applied where no such call is
found, where the call spreads a dict the script may have put drop_last in (`**kwargs`: a dict
of known keys, as pytorch/examples build `**train_kwargs`, is read), or a drop_last that is not a
literal, or where it already drops the last batch (the smaller batch comes from elsewhere).

Dropping the batch changes what is trained (its samples are left out of each epoch), so the
re-run's losses differ from the baseline's by design: verification.py does not judge its numerics
and says so, with the steps each side trained.
"""

from __future__ import annotations

import ast

from cagtool.verify.patch import Patch, unified_diff

NAME = "drop-last"
TITLE = "drop each epoch's smaller last batch (drop_last=True)"

_LOADERS = {"DataLoader": "drop_last", "TrainingArguments": "dataloader_drop_last"}
# The fix as the call it edits: HF Trainer's loader is set through its TrainingArguments.
_FIX_CALLS = {"DataLoader": "DataLoader(..., drop_last=True)", "TrainingArguments": "TrainingArguments(..., dataloader_drop_last=True)"}
_TITLES = {"DataLoader": TITLE, "TrainingArguments": "drop each epoch's smaller last batch (TrainingArguments(dataloader_drop_last=True))"}


def fix_call(patch: Patch) -> str:
    """The call the patch edits, as the fix reads: `TrainingArguments(..., dataloader_drop_last=True)`
    where it found an HF Trainer's arguments, else the DataLoader's (the explanation's words)."""
    return _FIX_CALLS[next((call for call, title in _TITLES.items() if title == patch.title), "DataLoader")]


def _callee(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    return name if name in _LOADERS else None


def _where(call: ast.Call) -> str:
    """The call a patch message names: a DataLoader(...) is the loader; TrainingArguments(...) is
    not one (HF Trainer builds its loader inside, from `dataloader_drop_last` among them)."""
    if _callee(call) == "TrainingArguments":
        return f"the TrainingArguments(...) at line {call.lineno} (HF Trainer builds its loader from them)"
    return f"the loader at line {call.lineno}"


def _assigned_names(tree: ast.AST) -> dict[int, str]:
    """id(call) -> the name it is assigned to (`train_loader = DataLoader(...)`)."""
    names: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names[id(node.value)] = target.id
                elif isinstance(target, ast.Attribute):
                    names[id(node.value)] = target.attr
    return names


def _keyword(call: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in call.keywords if k.arg == name), None)


def _is_true(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _training_loader(tree: ast.AST) -> tuple[ast.Call | None, str | None]:
    """The training loader's call (None where none is singled out), and why it is not edited (None: it is)."""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _callee(node) is not None]
    loaders = [c for c in calls if _callee(c) == "DataLoader"] or [c for c in calls if _callee(c) == "TrainingArguments"]
    if not loaders:
        return None, ("no DataLoader(...) or TrainingArguments(...) call in the script: the batches are made elsewhere (a library, "
                      "or sliced by hand): drop or pad the last batch there")
    names = _assigned_names(tree)
    candidates = loaders
    if len(candidates) > 1:
        named = [c for c in candidates if "train" in names.get(id(c), "").lower()]
        shuffled = [c for c in candidates if (k := _keyword(c, "shuffle")) is not None and _is_true(k.value)]
        candidates = named if len(named) == 1 else shuffled if len(shuffled) == 1 else candidates
    if len(candidates) > 1:
        lines = ", ".join(str(c.lineno) for c in candidates)
        return None, (f"the script makes {len(candidates)} loaders (lines {lines}) and none is named for training or alone shuffled: "
                      f"add {_LOADERS[_callee(candidates[0]) or 'DataLoader']}=True to the training one's")
    call = candidates[0]
    key = _LOADERS[_callee(call) or "DataLoader"]
    spread = [k.value for k in call.keywords if k.arg is None]
    if any(not (isinstance(v, ast.Name) and _dict_without(tree, v.id, key)) for v in spread):
        return call, f"{_where(call)} passes **kwargs, which may set {key}: add {key}=True there"
    given = _keyword(call, key)
    if given is not None and _is_true(given.value):
        return call, f"{_where(call)} already drops its last batch ({key}=True): the smaller batch is made elsewhere"
    if given is not None and not (isinstance(given.value, ast.Constant) and given.value.value in (False, None)):
        return call, f"{_where(call)} sets {key} from a value made at run time: set it to True there"
    return call, None


def _literal_without(node: ast.expr, key: str, tree: ast.AST, depth: int) -> bool:
    """`node` makes a dict whose keys are all known and none is `key`: a dict display of string
    constants, `dict(a=..., ...)`, either of two such (`{...} if accel else {}`), or a name that
    is only ever bound to such (_dict_without)."""
    if isinstance(node, ast.Dict):
        return all(isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value != key for k in node.keys)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return all(k.arg is not None and k.arg != key for k in node.keywords)
    if isinstance(node, ast.IfExp):
        return _literal_without(node.body, key, tree, depth) and _literal_without(node.orelse, key, tree, depth)
    if isinstance(node, ast.Name) and depth < 3:
        return _dict_without(tree, node.id, key, depth + 1)
    return False


def _dict_without(tree: ast.AST, name: str, key: str, depth: int = 0) -> bool:
    """Whether the script's `name`, spread into the loader's call (`**train_kwargs`), can never hold
    `key`: every binding of it is a dict of known keys (_literal_without), every `name.update(x)`
    adds one, every `name[k] = v` has a string k, none of them `key`. pytorch/examples build their
    loaders' arguments so: `train_kwargs = {'batch_size': args.batch_size}`, then
    `train_kwargs.update({'num_workers': 1, 'pin_memory': True, 'shuffle': True})` on an accelerator.
    A function parameter, a loop variable or any other binding of the name: not known."""
    bound = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id == name:
                    if node.value is None or not _literal_without(node.value, key, tree, depth):
                        return False
                    bound = True
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                    index = target.slice
                    if not (isinstance(index, ast.Constant) and isinstance(index.value, str) and index.value != key):
                        return False
                elif isinstance(target, (ast.Tuple, ast.List, ast.Starred)) and any(
                        isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
                    return False
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension, ast.withitem)):
            bound_there = node.target if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) else node.optional_vars
            if bound_there is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(bound_there)):
                return False
        elif isinstance(node, ast.arg) and node.arg == name:
            return False
        elif isinstance(node, (ast.NamedExpr,)) and node.target.id == name:
            return False
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
              and node.func.value.id == name and node.func.attr in ("update", "setdefault", "__setitem__", "__ior__")):
            if node.func.attr != "update" or len(node.args) != 1 or node.keywords or not _literal_without(node.args[0], key, tree, depth):
                return False
    return bound


def drop_last_patch(causes: tuple[int, ...], script: str | None, display: str | None, source: bytes | None) -> Patch:
    """The patch for the causes whose explanation says to drop the last batch; `source`: the
    script's bytes as checked against the record's seal (None for a module job)."""
    file = display or script or "?"
    if script is None or source is None:
        return Patch(NAME, causes, TITLE, file, None, "", False, "the job is not a script file cagtool can read (a module, or it moved)")
    try:
        text = source.decode("utf-8")
        tree = ast.parse(text)
    except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
        return Patch(NAME, causes, TITLE, file, None, "", False, f"the script cannot be parsed ({type(exc).__name__})")
    found, why = _training_loader(tree)
    callee = (_callee(found) if found is not None else None) or "DataLoader"
    key, title = _LOADERS[callee], _TITLES[callee]
    if found is None or why is not None:
        return Patch(NAME, causes, title, file, None, "", False, why)
    lines = text.splitlines(keepends=True)
    given = _keyword(found, key)
    if given is not None:
        # `drop_last=False`: the value is edited where it stands.
        value = given.value
        at, start, end = value.lineno - 1, value.col_offset, value.end_col_offset
        if value.lineno != value.end_lineno:
            return Patch(NAME, causes, title, file, found.lineno, "", False, f"the {key} at line {value.lineno} spans lines")
    else:
        # After the last argument: a trailing comma, a call over several lines, stay as they are.
        args = [*found.args, *(k.value for k in found.keywords)]
        if not args:
            return Patch(NAME, causes, title, file, found.lineno, "", False, f"{_where(found)} has no arguments")
        last = max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
        at, start, end = (last.end_lineno or last.lineno) - 1, last.end_col_offset or 0, last.end_col_offset or 0
    raw = lines[at].encode()
    edit = b"True" if given is not None else f", {key}=True".encode()
    after = list(lines)
    after[at] = (raw[:start] + edit + raw[end:]).decode()
    return Patch(NAME, causes, title, file, at + 1, unified_diff(file, lines, after), True, patched="".join(after))
