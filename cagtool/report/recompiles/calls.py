"""The call at a user's line, read from its code as the record keeps it (SourceRef.code): which
name it calls and with what (`cmodel(xv)`), and that call as the module before torch.compile
(`cmodel._orig_mod(xv)`): the fixes that skip a compile name it (explain.py, unexpected.py)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence


# A call of a plain name or of a module the caller holds (`self.net(x)`), not of another attribute (`x.view(...)`).
CALLED = r"(?<![\w.])(?P<name>self\.[A-Za-z_]\w*|[A-Za-z_]\w*)"
CALL_START = re.compile(r"(?<![\w.])(?P<name>[A-Za-z_]\w*)\(")
# ... or of a name held on `self` (`self.net(x)`: a compiled submodule, but also `self.log(...)`, a method).
SELF_CALL_START = re.compile(CALLED + r"\(")
_DEF_HEADER = re.compile(r"^\s*(?:async\s+)?def\s+\w+\s*\(")



# How an evaluation runs a module compiled in place (`module.compile()`, no `_orig_mod`) eagerly:
# set_stance's stance holds inside the block and is restored after it (docs/torch-internals.md).
FORCE_EAGER = ("evaluate under `with torch.compiler.set_stance(\"force_eager\"):` (compiled code runs eagerly inside it, "
               "and compiles nothing)")


def call_line(code: str | None) -> str:
    """The code of a caller's line that can call: a one-line function's body (`def forward(self, x):
    return self.net(x)` -> `return self.net(x)`), not its header, whose parameters (`self, x`) are
    no call's arguments."""
    code = code or ""
    header = _DEF_HEADER.match(code)
    if header is None:
        return code
    depth = 1
    for end in range(header.end(), len(code)):
        depth += {"(": 1, ")": -1}.get(code[end], 0)
        if depth == 0:
            body = code.find(":", end)
            return code[body + 1:] if body >= 0 else ""
    return ""


NOT_A_MODULE = frozenset({"print", "len", "float", "int", "str", "range", "list", "tuple", "dict", "sum", "max", "min", "abs", "round",
                           "isinstance", "getattr", "enumerate", "zip", "next", "iter", "sorted", "any", "all", "format",
                           # a LightningModule's own methods, which its steps call around the model
                           # (`self.log("val_loss", F.cross_entropy(self.model(x), y))`)
                           "self.log", "self.log_dict", "self.print", "self.all_gather", "self.manual_backward"})


def calls_on(code: str, start: re.Pattern[str] = CALL_START) -> list[tuple[str, str]]:
    """(name, arguments) of each call of a plain name on the line, outermost first: arguments may
    hold calls of their own (`cmodel(input_ids=batch(), labels=batch())`); a call not closed on the
    line is not one."""
    found = []
    for match in start.finditer(code):
        depth, start = 1, match.end()
        for end in range(start, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                found.append((match["name"], code[start:end].strip()))
                break
    return found


_KEYWORD = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)")


def _fit(args: str, params: Sequence[str]) -> tuple[bool, int]:
    """Whether a call's arguments can bind to the compiled function's parameters (`params`, in
    order, `self` first for a method; *args and **kwargs are not among them): no more positional
    arguments than parameters; and how many of its keywords are parameters' names."""
    parts = split_arguments(args) if args else []
    keywords = [m[1] for p in parts if (m := _KEYWORD.match(p))]
    positional = [p for p in parts if not _KEYWORD.match(p) and not p.startswith("*")]
    own = list(params)[1:] if list(params)[:1] == ["self"] else list(params)
    return len(positional) <= len(own), sum(k in own for k in keywords)


def compiled_call(code: str, params: Sequence[str] = (), compiled: Collection[str] = ()) -> tuple[str, str] | None:
    """(name, arguments) of the call at a user's line that called the compiled function, among the
    calls of a plain name or of one held on `self` that is not a builtin: the one whose name the
    script assigned a torch.compile result to (`compiled`, where known: verify/patches.py reads it
    from the script); else, where the compiled function's parameters are known (`params`, the
    record's co_argnames), the one whose arguments bind to them, the most keywords named first
    (`criterion(model(x), y)` against `forward(self, x)`: model, whose one argument fits;
    `model(input_ids=batch(32))`: model, not batch), the outermost of equals; None where the line
    holds no such call, or nothing tells (the callers fall back on their own reading)."""
    calls = [(name, args) for name, args in calls_on(call_line(code), SELF_CALL_START) if name not in NOT_A_MODULE]
    named = [call for call in calls if call[0] in compiled]
    if named and len({name for name, _ in named}) == 1:
        return named[0]
    if not params or not calls:
        return None
    fits = [(call, _fit(call[1], params)) for call in calls]
    fitting = [(call, matched) for call, (ok, matched) in fits if ok]
    if not fitting:
        return None
    most = max(matched for _, matched in fitting)
    # the outermost of equals (calls_on's order): `model(batch(32))` is the module's call, batch makes its input
    return next(call for call, matched in fitting if matched == most)


def uncompiled_call(code: str, params: Sequence[str] = (), wrapper: str = "") -> str:
    """uncompiled_call_of, through `wrapper` where the call went through one (SourceRef.wrapper:
    `DDP(torch.compile(model))` is called as `model`, the compiled module is `model.module`)."""
    call = uncompiled_call_of(code, params)
    return call.replace("._orig_mod(", ".module._orig_mod(", 1) if wrapper and not call.startswith("self._orig_mod(") else call


def uncompiled_call_of(code: str, params: Sequence[str] = ()) -> str:
    """The call of the compiled module at the user's line, as the module before torch.compile:
    `cmodel(xv)` -> `cmodel._orig_mod(xv)`: the call whose arguments bind to the compiled function's
    parameters where they are known (`params`: compiled_call); else the outermost call of a name
    that is not a builtin and passes arguments (a module takes its inputs; `batch()` that makes them
    is not it), else the first such call without arguments; the generic `model._orig_mod(x)` when
    the line holds none."""
    found = compiled_call(code, params)
    if found is not None:
        return f"{found[0]}._orig_mod({found[1]})"
    line = call_line(code)
    # A plain name first (`self(x)` inside `self.log(...)`), then one held on `self` (`self.net(x)`).
    calls = ([(name, args) for name, args in calls_on(line) if name not in NOT_A_MODULE]
             or [(name, args) for name, args in calls_on(line, SELF_CALL_START) if name not in NOT_A_MODULE])
    for name, args in sorted(calls, key=lambda call: not call[1]):
        return f"{name}._orig_mod({args})"
    return "model._orig_mod(x)"


def split_arguments(args: str) -> list[str]:
    """A call's arguments, split at its own commas (not those inside brackets or quotes:
    `data[:, :n], f(a, b), "x,y"` is three), each stripped; empty ones left out."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(args):
        if quote:
            quote = "" if char == quote and args[i - 1] != "\\" else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(args[start:i])
            start = i + 1
    parts.append(args[start:])
    return [p.strip() for p in parts if p.strip()]


def innermost_call(code: str) -> tuple[str, list[str]] | None:
    """(name, arguments) of the call a compiled function's caller made at its line: the innermost
    call of a plain name or of one held on `self` that is not a builtin, the first of them
    (`loss_fn(model(x), y)` -> model; `model(data[:len(src)], hidden)` -> model, not len), its
    arguments split at its own commas. None where the line holds no such call."""
    calls = [(name, args) for name, args in calls_on(call_line(code), SELF_CALL_START) if name not in NOT_A_MODULE]
    for name, args in calls:  # in the order they start: the first without a call inside it
        inner = [m for m in SELF_CALL_START.finditer(args) if m["name"] not in NOT_A_MODULE]
        if not inner:
            return name, split_arguments(args)
    return None
