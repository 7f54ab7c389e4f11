"""Torch's own text formats, read in one place: what torch 2.13 prints and logs, as capture,
trace_import and report read it.

Each format is pinned by a test on a real torch 2.13 string (tests/test_torch_text.py). The
importer and the reports use these without importing the capture (and so without the step
tracker and the observer).

| format | example (torch 2.13) |
| --- | --- |
| compiled-autograd cache miss | `Cache miss due to new autograd node: SubBackward0 (NodeCall 2) with key size 56, previous key sizes=[]` |
| | `Cache miss due to 4 changed tensor shapes (total of 4): sizes[0], sizes[1], sizes[2], sizes[3]` |
| a compile reason's CA id | `!6: Cache miss due to ...` (artifact `compiled_autograd_compile_reasons`) |
| compile ids | `!3` (a CA capture), `0/2` (forward frame 0, attempt 2), `!0/1/0` (Dynamo's compile of CA graph 0) |
| a guard-failure reason's id | `0/1: tensor 'x' size mismatch at index 0. expected 32, actual 48` |
| NodeCall origin | an FX node's stack trace ends `SumBackward0 (NodeCall 1)`; graph code comments `# ... code: SumBackward0 (NodeCall 1)` |
| AOT-inlined node | `aot0_mm`: node `mm` of AOT backward graph 0 |
| node reference | `%mul_1` in an FX node's printed arguments |
| graph break | `Graph break in user code at /x/train.py:12` (artifact `dynamo_graph_break_reason`) |
| graph-break message | `Encountered graph break when attempting to trace CALL: ...` then `<gb_type>`, `  Explanation: ...`, `  Hint: ...`, a link `.../gb/gb0025.html` |
| user frame | `File "/x/train.py", line 10, in f` then the code line |
| size guard | `tensor 'x' size mismatch at index 0. expected 32, actual 48` (a Dynamo guard failure) |
| value guard | `scale == 1.0`, `flag == True`, `self.use_relu == True`, `G['FLAG'] == True` (a Python value Dynamo specialised on) |
| a compiled module's guard tree | `GuardManager: source=L['fn'], ..., type=<class 'torch.nn.modules.linear.Linear'>` (artifact `dynamo_cpp_guards_str` of torch's module wrapper `inner`) |
| None guard | `self.config.problem_type is None` (NONE_MATCH: a value Dynamo compiled while it was None) |
| a value in a guard tree | `GuardManager: source=L['self'].param_groups[0]['lr'], ..., type=<class 'int'>` then `EQUALS_MATCH: L['self'].param_groups[0]['lr'] == 0` (a constant), or `TYPE_MATCH` alone (an input) |
| resume function | `torch_dynamo_resume_in_training_step_at_25`: the rest of `training_step` after its graph break at line 25 |
| recompile limit | `exceeding the recompile_limit cache size limit (currently set to 8)`, `hit config.recompile_limit (8)` |
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cagtool.record.schema import MISS_CHANGED_SHAPES, MISS_NEW_NODE, MISS_UNKNOWN

# -- compiled autograd's cache-miss messages --------------------------------------------------
_NEW_NODE = re.compile(
    r"Cache miss due to new autograd node: (?P<node>.+?) \(NodeCall (?P<call>\d+)\) "
    r"with key size (?P<key>\d+), previous key sizes=\[(?P<prev>[^\]]*)\]"
)
_CHANGED = re.compile(r"Cache miss due to (?P<n>\d+) changed tensor shapes \(total of (?P<total>\d+)\): (?P<sizes>.*)")
_SIZE_INDEX = re.compile(r"sizes\[(\d+)\]")
_CA_REASON_ID = re.compile(r"^!(\d+): ")


def parse_miss(message: str) -> dict[str, Any]:
    """The fields of a torch 2.13 cache-miss message (the caller keeps the verbatim text)."""
    match = _NEW_NODE.search(message)
    if match:
        prev = [int(p) for p in match.group("prev").replace(" ", "").split(",") if p]
        return {
            "miss_kind": MISS_NEW_NODE,
            "node": match.group("node"),
            "node_call": int(match.group("call")),
            "key_size": int(match.group("key")),
            "previous_key_sizes": prev,
        }
    match = _CHANGED.search(message)
    if match:
        return {
            "miss_kind": MISS_CHANGED_SHAPES,
            "indices": [int(i) for i in _SIZE_INDEX.findall(match.group("sizes"))],
            # N sizes changed; "total of M" counts every dynamic size of the new graph.
            "total_changed": int(match.group("n")),
            "dynamic_sizes": int(match.group("total")),
        }
    return {"miss_kind": MISS_UNKNOWN}


def split_ca_reason(reason: str) -> tuple[int | None, str]:
    """`!6: Cache miss ...` -> (6, `Cache miss ...`); (None, reason) without the id."""
    match = _CA_REASON_ID.match(reason)
    if match is None:
        return None, reason
    return int(match.group(1)), reason[match.end() :]


# -- compile ids --------------------------------------------------------------------------------
_COMPILE_ID = re.compile(r"^(?:!(?P<ca>\d+)/)?(?P<frame>\d+)/(?P<attempt>\d+)$")
_CA_ID = re.compile(r"^!(?P<ca>\d+)(?:/|$)")
_COMPILE_ID_IN_TEXT = re.compile(r"\[?(!?\d+/\d+(?:/\d+)?)\]?")
_REASON_ID_PREFIX = re.compile(r"^\s*-?\s*!?\d+/\d+(/\d+)?:\s*")


def compile_id_of(metadata: dict[str, Any]) -> str:
    """torch's CompileId string from a structured record's fields: `F/C`, `!N/F/C`, or `!N`."""
    ca = metadata.get("compiled_autograd_id")
    frame, attempt = metadata.get("frame_id"), metadata.get("frame_compile_id")
    parts = []
    if ca is not None:
        parts.append(f"!{ca}")
    if frame is not None:
        parts.append(f"{frame}/{attempt}")
    return "/".join(parts) if parts else "?"


def in_torch_optim(filename: str) -> bool:
    """Whether a compiled frame's file (a compile's `co_filename`) is torch.optim's code: an
    optimizer's step() compiled (the compiled-optimizer recipe, or a compiled training step)."""
    return "/torch/optim/" in filename.replace("\\", "/")


def frame_compile(compile_id: str) -> str | None:
    """F of a forward frame's compile id `F/C`; None for a compile inside a compiled-autograd graph
    (`!N/F/C`), which no frame of the script's own makes."""
    return None if compile_id.startswith("!") else compile_frame(compile_id)


def compile_attempt(compile_id: str) -> int | None:
    """C of `F/C` or `!N/F/C`: 0 for a first compile, >0 for a recompile of the same frame."""
    match = _COMPILE_ID.match(compile_id or "")
    return int(match["attempt"]) if match else None


def compile_frame(compile_id: str) -> str | None:
    """F of `F/C` or `!N/F/C`: the frame (code object) Dynamo compiled."""
    match = _COMPILE_ID.match(compile_id or "")
    return match["frame"] if match else None


def ca_id_of(compile_id: str) -> int | None:
    """N of `!N` or `!N/F/C`: the compiled-autograd graph the id belongs to."""
    match = _CA_ID.match(compile_id or "")
    return int(match["ca"]) if match else None


def compile_id_in(text: str) -> str | None:
    """The first `F/C` or `!N/F/C` in a message (`[0/8]` in a recompile-limit warning)."""
    match = _COMPILE_ID_IN_TEXT.search(text)
    return match.group(1) if match else None


def reason_compile_id(line: str) -> str | None:
    """The id of the cache entry a guard-failure line is about: `19/0: self.x == 0` -> `19/0`."""
    match = _REASON_ID_PREFIX.match(line)
    return match.group(0).strip().lstrip("-").strip().rstrip(":").strip() if match else None


def strip_reason_id(line: str) -> str:
    """A guard-failure line without its `0/1: ` (or `- 0/1: `) prefix."""
    return _REASON_ID_PREFIX.sub("", line)


_GUARD_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")


def guard_text(message: str) -> str:
    """The failing guard of one Dynamo reason, without the `0/1:` prefix and the `# source` comment."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return strip_reason_id(first).split("  #")[0].split(" # ")[0].strip()


_USER_STACK_HEADER = "\nUser stack trace:\n"
# A guard's comments in a reason: `k == 1   # return m(x) * k  # mp/ov/scal.py:5 in f` (torch cuts
# the path to its last characters), up to the next reason of the same entry (`; `) or the end.
_GUARD_COMMENT = re.compile(r"\s+# .*?(?=; |$)")


def reason_line(message: str) -> str:
    """One Dynamo guard-failure reason as one readable line: its entry's id and failing guard(s)
    without torch's comments, then the line of the job that installed the guard, from the "User
    stack trace" torch appends (its last frame in the user's code, else its last frame):
    `0/0: k == 1 (guarded at /job/train.py:5 in f: return m(x) * k)`."""
    head, _, stack = message.strip().partition(_USER_STACK_HEADER.strip("\n") + "\n")
    said = _GUARD_COMMENT.sub("", " ".join(head.split("\n")).strip()).strip()
    frames = traceback_frames(stack)
    if not frames:
        return said
    users = [f for f in frames if looks_like_user_file(f[0])]
    file, line, function, code = (users or frames)[-1]
    return f"{said} (guarded at {file}:{line} in {function}: {code})"


def guard_shape(message: str) -> str:
    """The guard with its numbers blanked, so `depth == 1` and `depth == 2` are one root cause."""
    return _GUARD_NUMBER.sub("N", guard_text(message))


# -- compiled-autograd graphs -------------------------------------------------------------------
# The end of an FX node's stack trace (`set_node_origin`): `SumBackward0 (NodeCall 1)`; in the
# logged graph code the same text follows `code: ` in a comment.
_ORIGIN = re.compile(r"^\s*(?:.*code: )?(?P<name>\S.*?) \(NodeCall (?P<call>\d+)\)\s*$")
_ORIGIN_IN_COMMENT = re.compile(r"code: (?P<name>\S.*?) \(NodeCall (?P<call>\d+)\)\s*$")
AOT_PREFIX = re.compile(r"^aot(\d+)_")  # compiled: the graph diff matches it per node
_GRAPH_CLASS = re.compile(r"^class CompiledAutograd(?P<id>\d+)\(")
NODE_REF = re.compile(r"%([A-Za-z_]\w*)")  # `%mul_1` in printed node arguments; group 1 the name
# A node reference or an integer constant, in printed node arguments (sizes: an integer in one
# graph, a reference to a size node in the next).
REF_OR_INT = re.compile(r"%[A-Za-z_][A-Za-z0-9_]*|(?<![\w.])-?\d+(?![\w.])")
INT_CONSTANT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")


def node_origin(text: str) -> tuple[int, str] | None:
    """(NodeCall, autograd node name) from the last line of an FX node's stack trace."""
    match = _ORIGIN.search(text)
    return (int(match.group("call")), match.group("name")) if match else None


def node_origin_in_comment(line: str) -> tuple[int, str] | None:
    """(NodeCall, autograd node name) from a comment of logged graph code (`# File: ... code: X (NodeCall k)`)."""
    match = _ORIGIN_IN_COMMENT.search(line)
    return (int(match.group("call")), match.group("name")) if match else None


def aot_graph_id(node_name: str) -> int | None:
    """N of a node named `aot<N>_...` (inlined from AOT backward graph N)."""
    match = AOT_PREFIX.match(node_name)
    return int(match.group(1)) if match else None


def strip_aot_prefix(node_name: str) -> str:
    return AOT_PREFIX.sub("", node_name)


def graph_class_id(code: str) -> int | None:
    """N from `class CompiledAutograd<N>(torch.nn.Module):` (the graph's compiled-autograd id)."""
    match = _GRAPH_CLASS.match(code.lstrip())
    return int(match.group("id")) if match else None


# torch's error for a backward that starts while another compiled-autograd backward runs in the
# process (python_compiled_autograd.cpp: one at a time; docs/torch-internals.md, "One thread's
# compiled autograd"): another thread's, or a backward nested inside a compiled one.
NESTED_CA_ERROR = "Trying to run compiled autograd within another compiled autograd call"


# -- Dynamo's messages --------------------------------------------------------------------------
_BREAK_AT = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)")
_USER_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n\s*(?P<code>[^\n]*)')
_LIMIT = re.compile(r"exceeding the (?P<type>\w*recompile_limit) cache size limit \(currently set to (?P<value>\d+)\)")
_LIMIT_LOG = re.compile(r"hit config\.(?P<type>\w*recompile_limit) \((?P<value>\d+)\)")


# The tensor's name is a source and may hold quotes of its own (`kwargs['input_ids']`, every HF
# model's keyword input): it ends at the first "' size" / "' stride".
_SIZE_GUARD = re.compile(r"tensor '(?P<name>.+?)' (?P<what>size|stride) mismatch at index (?P<index>\d+)\. "
                         r"expected (?P<expected>\d+), actual (?P<actual>\d+)")


def size_guard(text: str) -> tuple[str, int, int, int] | None:
    """(tensor, dim, expected, actual) of a failed size guard:
    `tensor 'x' size mismatch at index 0. expected 32, actual 48`."""
    match = _SIZE_GUARD.search(text)
    if match is None or match["what"] != "size":
        return None
    return match["name"], int(match["index"]), int(match["expected"]), int(match["actual"])


# The guard of a dynamic size (marked by hand, or made dynamic by a recompile): Dynamo specialises a
# size of 0 or 1 even there, so the size carries `2 <= x.size()[0]` (torch 2.13: "... due to 0/1
# specialization in the framework; to avoid specialization try
# torch._dynamo.decorators.mark_unbacked(tensor, dim)"), which a size of 0 or 1 fails.
_SPECIALISED_SIZE = re.compile(r"^2 <= (?P<name>\S+?)\.size\(\)\[(?P<dim>\d+)\]$")


def specialised_size(text: str) -> tuple[str, int] | None:
    """(tensor, dim) of a failed `2 <= x.size()[0]`: a dynamic dimension met a size of 0 or 1."""
    match = _SPECIALISED_SIZE.match(text.strip())
    return None if match is None else (match["name"], int(match["dim"]))


def size_or_stride_guard(text: str) -> str | None:
    """The tensor of a failed guard on one of its sizes or strides (`tensor 'x' stride mismatch at
    index 0. expected 1, actual 2`): what a dynamic dimension answers. None for any other guard."""
    match = _SIZE_GUARD.search(text)
    return None if match is None else match["name"]


# A guard on a Python constant's value (CONSTANT_MATCH). The source is torch's own spelling: a
# local as its bare name (`scale`; older torch wrote `L['scale']`), an attribute path
# (`self.use_relu`), a global as `G['FLAG']`.
_VALUE_GUARD = re.compile(
    r"^(?P<source>[A-Za-z_][\w.]*|[LG]\['[A-Za-z_]\w*'\](?:\.[A-Za-z_]\w*)*) == "
    r"(?P<value>True|False|-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|-?inf|nan)$"
)
_BRACKETED = re.compile(r"^(?P<scope>[LG])\['(?P<name>[A-Za-z_]\w*)'\](?P<rest>(?:\.[A-Za-z_]\w*)*)$")


def value_guard(text: str) -> tuple[str, str, str] | None:
    """(scope, name, value) of a failed guard on a Python value: scope `local` (the compiled
    function's own variable: `scale == 1.0`, `L['scale'] == 1.0`), `attribute` (`self.use_relu
    == True`: name is the dotted path) or `global` (`G['FLAG'] == True`); value as torch printed it.
    None for any other guard (a tensor's size, an object's id, a type)."""
    match = _VALUE_GUARD.match(text.strip())
    if match is None:
        return None
    source, value = match["source"], match["value"]
    bracketed = _BRACKETED.match(source)
    if bracketed is not None:
        if bracketed["rest"]:
            return "attribute", bracketed["name"] + bracketed["rest"], value
        return ("global" if bracketed["scope"] == "G" else "local"), bracketed["name"], value
    return ("attribute" if "." in source else "local"), source, value


# The hook type compiled autograd's graph names a post-accumulate-grad hook with (`call_hook(...,
# hook_type='post_acc_grad_hook')`: DDP's all-reduce hook on every parameter, a user's
# register_post_accumulate_grad_hook).
POST_ACC_GRAD_HOOK = "post_acc_grad_hook"


# What a failed Dynamo guard is on, read from torch 2.13's own reason text (`get_guard_fail_reason`
# in torch/_dynamo/guards.py, as TORCH_LOGS=recompiles prints it). Each kind has its own cause
# words and fixes in report/recompiles/explain.py.
GUARD_GRAD_MODE = "grad_mode"  # `GLOBAL_STATE changed: grad_mode` (no_grad / inference evaluation)
GUARD_GLOBAL_STATE = "global_state"  # other `GLOBAL_STATE changed: ...` (autocast, deterministic algorithms, ...)
GUARD_REQUIRES_GRAD = "requires_grad"  # `tensor 'p' requires_grad mismatch` (a module frozen or unfrozen)
GUARD_SIZE = "size"  # `tensor 'x' size mismatch at index 0` / `stride mismatch`
GUARD_TENSOR_META = "tensor_meta"  # a tensor's dtype, device or dispatch keys
GUARD_LENGTH = "length"  # `len(xs) == 3`, `not xs`: a Python container's length or emptiness
GUARD_VALUE = "value"  # `scale == 1.0`, `self.flag == True`: a Python number or flag
GUARD_NONE = "none"  # `self.config.problem_type is None`: a value that was None when compiled
GUARD_ID = "id"  # ___check_obj_id: a different object
GUARD_TYPE = "type"  # ___check_type_id: a value of another type
GUARD_OTHER = "other"

_LENGTH_GUARD = re.compile(r"^(?:len\((?P<len>[^()]+)\) == \d+|not (?P<not>[A-Za-z_][\w.\[\]'\"]*))$")


def global_state_changes(text: str) -> list[str]:
    """The parts of the global state a `GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled` guard
    names as changed, in torch's order (empty for any other guard)."""
    head, found, rest = text.strip().partition("GLOBAL_STATE changed:")
    return rest.split() if found and not head.strip() else []


def guard_kind(text: str) -> str:
    """The kind of one failed guard (GUARD_*), from torch's reason text for it."""
    guard = text.strip()
    lowered = guard.lower()
    if lowered.startswith("global_state changed"):
        return GUARD_GRAD_MODE if "grad_mode" in lowered else GUARD_GLOBAL_STATE
    if "requires_grad mismatch" in lowered:
        return GUARD_REQUIRES_GRAD
    if "size mismatch" in lowered or "stride mismatch" in lowered or "rank mismatch" in lowered or _SPECIALISED_SIZE.match(guard):
        return GUARD_SIZE
    if re.search(r"(?:dtype|device|dispatch key set) mismatch", lowered):
        return GUARD_TENSOR_META
    if _LENGTH_GUARD.match(guard):
        return GUARD_LENGTH
    if value_guard(guard) is not None:
        return GUARD_VALUE
    if none_guard(guard) is not None:
        return GUARD_NONE
    if "check_obj_id" in lowered or "id_match" in lowered:
        return GUARD_ID
    if "check_type_id" in lowered or "type_match" in lowered or _TENSOR_TYPE_GUARD.match(guard):
        return GUARD_TYPE
    return GUARD_OTHER


# A guard Dynamo wrote on a Python int it made dynamic after the int changed (automatic dynamic):
# a comparison of an arithmetic expression of names and numbers, `(step % 2) != 0`, `step < 10`.
_INT_EXPRESSION_GUARD = re.compile(r"^[\w\s()%+\-*/]+(?:==|!=|<=|>=|<|>)[\w\s()%+\-*/]+$")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def guarded_names(text: str) -> tuple[str, ...]:
    """The Python names one failed guard is on, where it is on Python values: `scale == 1.0` ->
    (scale,), `self.flag == True` -> (self.flag,), `(step % 2) != 0` -> (step,); () for any other
    guard (a tensor's size, an object's id, a type)."""
    found = value_guard(text)
    if found is not None:
        return (found[1],)
    guard = text.strip()
    if not _INT_EXPRESSION_GUARD.match(guard) or "size" in guard or "stride" in guard:
        return ()
    return tuple(dict.fromkeys(n for n in _NAME.findall(guard) if n not in ("and", "or", "not", "True", "False", "None")))


# A source as torch's reasons print it: a name, then attributes and subscripts
# (`self.config.problem_type`, `self.param_groups[0]['lr']`, `G['FLAG']`).
_SOURCE = r"(?:[A-Za-z_]\w*|[LG]\['[^']+'\])(?:\.[A-Za-z_]\w*|\[[^\]]+\])*"
_NONE_GUARD = re.compile(rf"^(?P<source>{_SOURCE}) is None$")
_EQUALS_GUARD = re.compile(rf"^(?P<source>{_SOURCE}) == (?P<value>.+)$")


def call_guard(guards: list[str]) -> str:
    """The failure that is the call's own among a recompile's failing guards (torch lists each cache
    entry's first failing guard, newest entry first; `guards` without their `0/1:` prefixes): an
    entry made for another grad mode or global state fails on it first, whatever else differs
    (Dynamo checks the global state before any input), so where another entry fails on something
    else, that entry was made for this call's state and its failure is the call's (a reentrant
    checkpoint's forward under no_grad, its recompute's entry made with grad on, then a longer
    sequence: the size, not the grad mode; torch 2.13's recompiles log). Else the first."""
    if not guards:
        return ""
    if tells_entries_apart(guards[0]):
        other = next((g for g in guards[1:] if not tells_entries_apart(g)), None)
        if other is not None:
            return other
    return guards[0]


def tells_entries_apart(guard: str) -> bool:
    """A failure that says the entry was made for another form of the call, whatever else differs:
    another grad mode or global state, an optional argument given as None where the entry had a
    tensor, or the other way (`none_variant`), or an argument that requires grad where the entry's
    did not, or the other way (`requires_grad_variant`: a GAN's discriminator called on real data
    and on the generator's output), or a bool of the other value (`bool_value_guard`). Where another entry fails on something else, that entry is of
    the call's own form (an attention mask given, then a dropout's p changed: the entry made without
    the mask fails on the mask, the one made with it on p; dcgan's discriminator on a smaller last
    batch of real data: the entry made for fake data fails on requires_grad, the one made for real
    data on the size)."""
    return (guard_kind(guard) in (GUARD_GRAD_MODE, GUARD_GLOBAL_STATE) or none_variant(guard) is not None
            or requires_grad_variant(guard) is not None or bool_value_guard(guard) or type_variant(guard) is not None
            or length_variant(guard) is not None)


def length_variant(text: str) -> str | None:
    """The argument of a failed length guard on the compiled frame's own input (`len(args) == 1`,
    `not args`): an entry made for a call with another number of positional arguments (a wrapper
    around several forwards, some called positionally) or another length of a list passed in.
    Where another entry fails on something else (the batch's size), that entry has the call's own
    length, and the other failure is the call's. None for any other guard."""
    if guard_kind(text) != GUARD_LENGTH:
        return None
    match = _LENGTH_GUARD.match(text.split("  #", 1)[0].strip())
    name = (match["len"] or match["not"]) if match else None
    return name if name is not None and _CALL_INPUT.fullmatch(name) else None


_TYPE_ID_GUARD = re.compile(r"^___check_type_id\((.+?), \d+\)")


def type_variant(text: str) -> str | None:
    """The argument of a failed `___check_type_id(args[0], N)` guard where it is the compiled
    frame's own input: an entry made for a value of another class. A library's decorator wrapper
    that several modules' forwards go through (transformers' `deprecate_kwarg` `wrapped_func`, a
    frame of its own after a graph break) is compiled once per module class: the entry made for
    LlamaModel fails on the type where the one made for LlamaForCausalLM fails on the batch's size
    (torch 2.13's recompiles log, an HF Trainer job's last batch). None for any other guard."""
    match = _TYPE_ID_GUARD.match(text.strip())
    return match.group(1) if match is not None and _CALL_INPUT.fullmatch(match.group(1)) else None


def bool_value_guard(guard: str) -> bool:
    """A failed guard on a bool's value (`flag == False`): an entry made for the flag's other value,
    one entry per value (DDP's `require_backward_grad_sync`, off under `no_sync()`, read by the
    hooks a CA graph runs: the entry made for True fails on a size where the one made for False
    fails on the flag; torch 2.13's recompiles log)."""
    found = equals_guard(guard.split("\n", 1)[0])
    return found is not None and found[1].split("  #", 1)[0].strip() in ("True", "False")


_REQUIRES_GRAD_GUARD = re.compile(r"^tensor '(.+?)' requires_grad mismatch")
# A compiled frame's own input: its argument `input`, or a compiled module's `args[0]` / `kwargs['x']`.
_CALL_INPUT = re.compile(r"[A-Za-z_]\w*|args\[\d+\]|kwargs\['\w+'\]")


def requires_grad_variant(text: str) -> str | None:
    """The argument of a failed `tensor 'input' requires_grad mismatch` guard, where it is the
    compiled frame's own input (`input`, `args[0]`, `kwargs['x']`): a call whose input requires grad (or does not) where
    the entry's did not (or did). A parameter's (`self._modules['0']._parameters['weight']`) is a
    module frozen or unfrozen, not another form of the call: None, as for any other guard."""
    match = _REQUIRES_GRAD_GUARD.match(text.strip())
    return match.group(1) if match is not None and _CALL_INPUT.fullmatch(match.group(1)) else None


def none_variant(text: str) -> str | None:
    """The argument of a failed guard that tells a call passing it as None from one passing a
    tensor: `attention_mask is None` (the entry was made with None, a tensor came) or `expected type
    of 'attention_mask' to be a tensor type, but found <class 'NoneType'>` (the other way). Only a
    plain name, the compiled frame's own argument (an attribute that was None is a value set later,
    GUARD_NONE's words); None for any other guard."""
    name = none_guard(text)
    if name is None:
        typed = tensor_type_guard(text)
        name = typed[0] if typed is not None and typed[1] == "NoneType" else None
    return name if name is not None and re.fullmatch(r"[A-Za-z_]\w*", name) else None


# Dynamo's guard on the code of a hook a compiled-autograd graph calls (the graph's `hooks` input):
# `___check_obj_id(hooks[0].__code__, 1396...)`.
_HOOK_CODE_GUARD = re.compile(r"___check_obj_id\(hooks\[(\d+)\]\.__code__,")


def hook_code_guard(text: str) -> int | None:
    """The index of the hook whose code a failed guard of a compiled-autograd graph's compile is
    on (another hook function ran in the graph); None for any other guard."""
    found = _HOOK_CODE_GUARD.search(text)
    return int(found.group(1)) if found else None


# Dynamo's guard on the class of a custom autograd.Function whose backward a compiled-autograd graph
# calls (the graph's code passes it to torch's `call_backward` as `backward_c_function`; torch 2.13):
# `___check_type_id(backward_c_function, 9485...), type=<class 'torch.autograd.function.GradReverseBackward'>`.
# It fails when the Function is another class of that name: one made anew at each call.
_FUNCTION_CLASS_GUARD = re.compile(r"___check_type_id\(backward_c_function, \d+\)")


def backward_function_class(text: str) -> str | None:
    """The backward class a failed guard of a compiled-autograd graph's compile names
    (`ApplyTemplateBackward`), where the guard is on the class of the custom autograd.Function the
    graph calls; None for any other guard."""
    if _FUNCTION_CLASS_GUARD.search(text) is None:
        return None
    named = _CLASS_TEXT.search(text)
    return named["name"].rsplit(".", 1)[-1] if named else None


# The type check of Dynamo's guard on a tensor input (TENSOR_MATCH, guards.cpp TensorCheck): torch 2.13
# writes `expected type of 't' to be a tensor type, ' but found <class 'torch.nn.parameter.Parameter'>`
# (the stray quote is torch's), or `..., but found a different type`.
# torch 2.14 and 2.15 write `expected type of 'attention_mask' to be <class 'torch.Tensor'>, but found <class 'NoneType'>`.
_TENSOR_TYPE_GUARD = re.compile(r"^expected type of '(?P<name>.+)' to be (?:a tensor type, '? ?|<class '[\w.]+'>, )but found (?P<found>.+)$")
_CLASS_TEXT = re.compile(r"<class '(?P<name>[\w.]+)'>")
_TENSOR_CLASS_NAMES = {"torch.nn.parameter.Parameter": "nn.Parameter", "torch.nn.parameter.Buffer": "nn.Buffer"}


def tensor_type_guard(text: str) -> tuple[str, str | None] | None:
    """(the tensor input's name, the type it has now: `nn.Parameter`, None where torch does not say)
    of a failed guard on a tensor input's type: it was compiled for another type (a plain Tensor,
    then the Parameter itself). None for any other guard."""
    match = _TENSOR_TYPE_GUARD.match(text.strip())
    if match is None:
        return None
    found = match["found"].strip()
    if found == "a different type":
        return match["name"], None
    named = _CLASS_TEXT.fullmatch(found)
    name = named["name"] if named else found
    return match["name"], _TENSOR_CLASS_NAMES.get(name, name)


def none_guard(text: str) -> str | None:
    """The source of a failed guard that it is None (torch's NONE_MATCH): `self.config.problem_type
    is None` -> `self.config.problem_type`: Dynamo compiled the frame while it was None."""
    match = _NONE_GUARD.match(text.strip())
    return match["source"] if match else None


def equals_guard(text: str) -> tuple[str, str] | None:
    """(source, value as torch wrote it) of a failed guard on a constant (EQUALS_MATCH):
    `self.param_groups[0]['lr'] == 0` -> ("self.param_groups[0]['lr']", "0")."""
    match = _EQUALS_GUARD.match(text.strip())
    return (match["source"], match["value"].strip()) if match else None


def python_type_of(value: str) -> str:
    """The type of a constant as torch wrote it (its repr): `0` int, `0.0` float, `'a'` str, `True`
    bool, `None` NoneType; "" for anything else. A float's repr always holds `.`, `e`, inf or nan,
    so the int 0 and the float 0.0 differ here as they do in torch's guard."""
    value = value.strip()
    if value in ("True", "False"):
        return "bool"
    if value == "None":
        return "NoneType"
    if re.fullmatch(r"-?\d+", value):
        return "int"
    if re.fullmatch(r"-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf|nan)", value):
        return "float"
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return "str"
    return ""


@dataclass(frozen=True)
class GuardedValue:
    """What one compile guarded on a Python value, from its guard tree (`dynamo_cpp_guards_str`)."""

    type_name: str  # the class torch saw there: "int", "float", "BertConfig"
    constant: str | None  # the value it matched (`0.0`, `'single_label_classification'`, `None`); None: only the type (an input)


def source_prefixes(source: str) -> list[str]:
    """The objects a source reaches its value through, outermost first: `self.config.problem_type`
    -> [`self`, `self.config`]."""
    parts = re.findall(r"\.[A-Za-z_]\w*|\[[^\]]+\]", source)
    head = source[: len(source) - len("".join(parts))] if parts else source
    return [head + "".join(parts[:n]) for n in range(len(parts))]


def tree_source(source: str) -> str:
    """A source as a reason prints it (`self.x`) as the guard tree spells it (`L['self'].x`)."""
    return source if source.startswith(("L[", "G[")) else re.sub(r"^([A-Za-z_]\w*)", r"L['\1']", source)


_GLOBAL_STATE_GRAD_MODE = re.compile(r'GLOBAL_STATE: ___check_global_state\(\) against \{[^\n]*?"grad_mode":(true|false)')


def compiled_grad_mode(guards: str) -> bool | None:
    """The grad mode a compile was made for, from its guard tree's GLOBAL_STATE guard (torch prints
    the state it checks against as JSON: `"grad_mode":true`); None when the tree does not say."""
    found = _GLOBAL_STATE_GRAD_MODE.search(guards)
    return None if found is None else found.group(1) == "true"


# A tensor guard's dispatch keys, as torch 2.13 prints them in the tree (`check_tensor(L['x'], Tensor,
# DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), ...`): the tensor's keys with the
# thread's local include/exclude sets applied, which torch.inference_mode() sets to exclude every
# autograd key (torch.no_grad() leaves them).
_TENSOR_KEYS = re.compile(r"TENSOR_MATCH: check_tensor\([^\n]*?DispatchKeySet\((?P<keys>[^)]*)\)")


def compiled_inference_mode(guards: str) -> bool | None:
    """Whether a compile made with grad mode off was made under torch.inference_mode() (True) or
    torch.no_grad() (False), from its guard tree: under inference mode no tensor guard's dispatch
    keys hold an autograd key, under no_grad every ordinary tensor's do. None when the tree does not
    say (grad mode on, or no tensor guard)."""
    if compiled_grad_mode(guards) is not False:
        return None
    keys = [m["keys"] for m in _TENSOR_KEYS.finditer(guards)]
    if not keys:
        return None
    return not any("Autograd" in k for k in keys)


# A tensor's sizes in a compile's guard tree (`TENSOR_MATCH: check_tensor(L['args'][0], Tensor, ...,
# size=[4, None], stride=[None, 1])`): `None` where the compile took that dimension dynamic (torch
# 2.13 prints the sizes it guards on, None for a symbolic one).
_TENSOR_SIZES = re.compile(r"TENSOR_MATCH: check_tensor\((?P<source>[^,\n]+), [^\n]*?size=\[(?P<size>[^\]]*)\]")


def compiled_dynamic_dim(guards: str, source: str, dim: int) -> bool | None:
    """Whether a compile took dim `dim` of the tensor `source` (as a size guard's reason names it:
    `args[0]`) dynamic, from its guard tree; None when the tree guards no such tensor or dim."""
    wanted = tree_source(source)
    for match in _TENSOR_SIZES.finditer(guards):
        if match["source"].strip() == wanted:
            sizes = [s.strip() for s in match["size"].split(",")]
            return sizes[dim] == "None" if dim < len(sizes) else None
    return None


# A tensor guard's dispatch keys that failed (`tensor 'args[0]' dispatch key set mismatch. expected
# DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU), actual DispatchKeySet(CPU,
# BackendSelect)`): the keys hold the thread's local exclude set, so torch.inference_mode() drops
# the autograd keys (see _TENSOR_KEYS above).
_DISPATCH_KEYS_GUARD = re.compile(r"dispatch key set mismatch\. expected DispatchKeySet\((?P<expected>[^)]*)\), actual DispatchKeySet\((?P<actual>[^)]*)\)")


def inference_mode_switch(text: str) -> bool | None:
    """Of a failed guard on a tensor's dispatch keys: True where the call dropped every autograd key
    the cached entry had (it ran under torch.inference_mode(), or was given an inference tensor),
    False where it gained them (out of inference mode after a call in it); None for any other
    guard, or keys that differ otherwise (another device)."""
    match = _DISPATCH_KEYS_GUARD.search(text)
    if match is None:
        return None
    def autograd(keys: str) -> bool:
        return "Autograd" in keys
    def rest(keys: str) -> set[str]:
        return {k.strip() for k in keys.split(",") if k.strip() and "Autograd" not in k and k.strip() != "ADInplaceOrView"}
    if rest(match["expected"]) != rest(match["actual"]) or autograd(match["expected"]) == autograd(match["actual"]):
        return None
    return autograd(match["expected"])


# A guard on a module's train/eval flag, as torch prints it failing (`fn._modules['1'].training ==
# True`, `self.training == False`, `L['self'].encoder.training == True`): the module's path, and the
# value the failed entry was compiled for.
_TRAINING_GUARD = re.compile(r"^(?P<module>\S+?)\.training == (?P<value>True|False)$")


def training_guard(text: str) -> tuple[str, bool] | None:
    """(module source, the `training` value the failed entry was compiled for) of a failed guard on
    a module's train/eval flag; None for any other guard."""
    match = _TRAINING_GUARD.match(text.strip().split("  #")[0].strip())
    return None if match is None else (match["module"], match["value"] == "True")


def submodule_name(source: str) -> str:
    """A module's path under the compiled module, as `named_modules()` names it: `fn._modules['1']`
    -> `1`, `L['self']._modules['encoder']._modules['drop']` -> `encoder.drop`, `self.layers[0]` ->
    `layers.0`; "" for the compiled module itself (`fn`, `self`)."""
    parts = re.findall(r"\._modules\[['\"]([^'\"]+)['\"]\]|\.([A-Za-z_]\w*)|\[(\d+)\]", source)
    return ".".join(name for found in parts if (name := "".join(found)) != "_modules")


def guarded_value(guards: str, source: str) -> GuardedValue | None:
    """What a compile's guard tree holds on `source` (as a reason prints it): its type, and the
    constant it matched (EQUALS_MATCH `== v`, NONE_MATCH `None`, a bool's TRUE_MATCH / FALSE_MATCH)
    or None when torch guarded only its type (TYPE_MATCH: the value is an input of the graph). None
    when the tree does not guard it."""
    spelled = re.escape(tree_source(source))
    manager = re.search(rf"GuardManager: source={spelled}, .*?type=<class '(?:[\w.]*\.)?(?P<cls>\w+)'>", guards)
    if manager is None:
        return None
    if re.search(rf"NONE_MATCH: {spelled} is None\b", guards):
        return GuardedValue(manager["cls"], "None")
    flag = re.search(rf"(?:TRUE|FALSE)_MATCH: {spelled} == (?P<value>True|False)\b", guards)
    if flag is not None:
        return GuardedValue(manager["cls"], flag["value"])
    equals = re.search(rf"EQUALS_MATCH: {spelled} == (?P<value>.+?)(?:\s+#|$)", guards, re.MULTILINE)
    return GuardedValue(manager["cls"], equals["value"].strip() if equals else None)


def assigned_at(guards: str, source: str) -> tuple[str, str] | None:
    """(code, `file:line`) of an assignment to `source` inside the compiled code, where a guard's
    comment quotes it: torch comments each guard with the line that made it (`# self.config.
    problem_type = "single_label_classification"  # transformers/models/bert/modeling_bert.py:1119
    in forward`): the compiled code sets that value itself."""
    match = re.search(rf"# (?P<code>{re.escape(source)} = [^#\n]+?)\s+# (?P<where>\S+:\d+) in ", guards)
    return (match["code"].strip(), match["where"]) if match else None


def none_guards_broken(failed: str, new: str) -> list[tuple[str, str, tuple[str, str] | None]]:
    """The values a failed cache entry's guard tree (`failed`) holds to be None (NONE_MATCH) that
    the recompile's own tree (`new`, compiled for the call the entry failed on) holds as another
    value: (source, that value, where the compiled code assigns it (assigned_at) or None). Each is a
    guard that failed at that call too, whichever guard torch's reason names (it names the first
    that fails: a size guard, for instance)."""
    found: list[tuple[str, str, tuple[str, str] | None]] = []
    for match in _NONE_MATCH_LINE.finditer(failed):
        source = none_guard(match["guard"])
        if source is None or any(readable_source(source) == f[0] for f in found):
            continue
        readable = readable_source(source)
        now = guarded_value(new, readable)
        if now is None or now.type_name == "NoneType" or now.constant in (None, "None"):
            continue
        found.append((readable, now.constant, assigned_at(failed, readable) or assigned_at(new, readable)))
    return found


_NONE_MATCH_LINE = re.compile(r"NONE_MATCH: (?P<guard>[^#\n]+?)\s+#")


_RESUME = re.compile(r"^(?:torch_dynamo_resume_in_)+(?P<function>.+?)(?:_at_\d+)*_at_(?P<line>\d+)$")


def resume_function(co_name: str) -> tuple[str, int] | None:
    """(function, line) of a resume function Dynamo made after a graph break (torch/_dynamo/
    resume_execution.py): `torch_dynamo_resume_in_training_step_at_25` is the rest of
    `training_step` from line 25, where the break was; a resume of a resume names the first
    function and the latest break."""
    match = _RESUME.match(co_name or "")
    return (match["function"], int(match["line"])) if match else None


def module_hooks_list(container: str | None) -> bool:
    """Whether a length guard's container is torch's list of a module's full backward hooks, as a
    compiled-autograd graph's code reaches it: `hooks[0].__closure__[0].cell_contents.user_hooks`
    (the BackwardHook of torch/utils/hooks.py, the module run eagerly) or `...keywords['bw_state'].hook2`
    (the BackwardState through which a compiled forward hands them to its backward)."""
    return bool(container) and _MODULE_HOOKS_LIST.search(container) is not None  # type: ignore[arg-type]


_MODULE_HOOKS_LIST = re.compile(r"\.user_hooks$|\['bw_state'\]\.hook\d+$")


def length_guard_name(text: str) -> str | None:
    """The container a length guard is on, as the job's code names it: `len(grad_norms) == 3` ->
    `grad_norms`; `not G['__import___main__'].norms` (a hook's global, read through its module) -> `norms`."""
    match = _LENGTH_GUARD.match(text.strip())
    return readable_source(match["len"] or match["not"]) if match else None


def length_guard_is_emptiness(text: str) -> bool:
    """Whether a length guard checks only that its container is empty (`not norms`: Dynamo saw it empty)."""
    match = _LENGTH_GUARD.match(text.strip())
    return bool(match and match["not"])


# A module Dynamo imported into a frame's globals to reach one of its names (`G['__import___main__']`,
# `G['__import_torch_dot_nn_dot_modules_dot_linear']`), and a frame's local or global by name.
_IMPORTED_MODULE = re.compile(r"G\['__import_(?P<module>\w+)'\]\.")
_NAMED = re.compile(r"[GL]\['(?P<name>[A-Za-z_]\w*)'\]")


def readable_source(source: str) -> str:
    """A guard's source as the job's code names it: `G['__import___main__'].norms` -> `norms`,
    `G['__import_mypkg_dot_stats'].seen` -> `mypkg.stats.seen`, `L['self'].x` -> `self.x`."""
    def module(match: re.Match[str]) -> str:
        name = match["module"].replace("_dot_", ".")
        return "" if name == "__main__" else name + "."
    return _NAMED.sub(r"\g<name>", _IMPORTED_MODULE.sub(module, source))


# A module in Dynamo's guard tree (`dynamo_cpp_guards_str`), a frame local: the closure `fn` of
# torch's wrapper of a compiled module's call, or a compiled method's `self`: `GuardManager:
# source=L['fn'], ..., type=<class 'torch.nn.modules.container.Sequential'>`, its submodules
# `L['fn']._modules['0']`.
def _module_pattern(local: str) -> re.Pattern[str]:
    return re.compile(rf"GuardManager: source=L\['{re.escape(local)}'\](?P<path>(?:\._modules\['[^']*'\])*), .*?"
                      r"type=<class '(?:[^'\n]*\.)?(?P<cls>\w+)'>")  # a class made in a function: `f.<locals>.Layer`


# A parameter of that module in the same tree, with its size: `TENSOR_MATCH: check_tensor(L['fn'].
# _modules['0']._parameters['weight'], Parameter, ..., size=[16, 4], stride=[4, 1])`.
def _parameter_pattern(local: str) -> re.Pattern[str]:
    return re.compile(rf"TENSOR_MATCH: check_tensor\(L\['{re.escape(local)}'\](?P<path>(?:\._modules\['[^']*'\])*)"
                      r"\._parameters\['(?P<name>[^']*)'\], .*?size=\[(?P<size>[^\]]*)\]")


_MODULE_LOCALS = {local: (_module_pattern(local), _parameter_pattern(local)) for local in ("fn", "self")}


def wrapped_module(guards: str, local: Literal["fn", "self"] = "fn") -> tuple[str, ...]:
    """The module a compile of torch's shared module wrapper (`inner`) was for, from its guard
    tree: `("Sequential", "0=Linear", "1=Tanh", "0.weight:[16, 4]")`, the class of `fn`, each
    submodule by its path, then each parameter guarded with its size (two modules of one
    architecture and other widths, a GAN's G and D, differ there); () when the tree guards no `fn`.
    With `local="self"`: the module a compiled method was called on (a module class's
    `@torch.compile def forward`, shared by its instances)."""
    modules, parameters = _MODULE_LOCALS[local]
    found: list[str] = []
    for match in modules.finditer(guards):
        path = ".".join(re.findall(r"\['([^']*)'\]", match["path"]))
        item = f"{path}={match['cls']}" if path else match["cls"]
        if item not in found:
            found.append(item)
    if not found:
        return ()
    for match in parameters.finditer(guards):
        path = ".".join([*re.findall(r"\['([^']*)'\]", match["path"]), match["name"]])
        item = f"{path}:[{match['size']}]"
        if item not in found:
            found.append(item)
    return tuple(found)


# A graph break on a call into Python's random module, which Dynamo does not trace (torch 2.13:
# "Dynamo does not know how to trace the builtin `<unknown module>.Random.random.`", "the function
# `Random.choice` in file .../random.py should not be traced").
_RANDOM_SKIPPED = re.compile(r"`(?:<unknown module>\.)?(?P<name>Random\.\w+)\.?`")


def random_module_call(reason: str) -> str | None:
    """`Random.random` where a graph break's reason is Dynamo not tracing a call of Python's random
    module; None otherwise."""
    match = _RANDOM_SKIPPED.search(reason) if "Random." in reason else None
    return match["name"] if match else None


# torch 2.14 and 2.15 trace a call of Python's random module (Dynamo draws the value itself), and
# break on the branch that compares it instead ("Data-dependent branching"): the draw is read from
# the line's code (`if self.training and random.random() < self.p:`).
_RANDOM_IN_CODE = re.compile(r"(?<![\w.])random\.(?P<fn>random|uniform|randint|randrange|choice|choices|sample|gauss|"
                             r"normalvariate|betavariate|triangular|expovariate|getrandbits)\s*\(")


# A tensor draw compared in Python control flow (`if torch.rand(()) < p:`): a data-dependent branch on
# a random draw in every torch version.
_TORCH_DRAW_IN_CODE = re.compile(r"(?<![\w.])torch\.(?P<fn>rand|rand_like|randint|bernoulli|randn)\s*\(")


def random_draw_in_code(code: str) -> str | None:
    """`Random.random` where a line of code calls Python's random module (`random.random()`), named
    as torch 2.13's graph break names it; `torch.rand` where it draws a tensor (`torch.rand(())`);
    None otherwise."""
    match = _RANDOM_IN_CODE.search(code or "")
    if match:
        return f"Random.{match['fn']}"
    drawn = _TORCH_DRAW_IN_CODE.search(code or "")
    return f"torch.{drawn['fn']}" if drawn else None


def graph_break_at(payload: str) -> tuple[str, int] | None:
    """(file, line) of `Graph break in user code at FILE:LINE`."""
    match = _BREAK_AT.search(payload)
    return (match.group("file"), int(match.group("line"))) if match else None


def traceback_frames(text: str) -> list[tuple[str, int, str, str]]:
    """(file, line, function, code) of each `File "...", line N, in f` + code line, in order."""
    return [(m["file"], int(m["line"]), m["func"], m["code"].strip()) for m in _USER_FRAME.finditer(text)]


def recompile_limit(text: str) -> tuple[str, int | None] | None:
    """(limit name, its value) when the text says Dynamo hit a recompile limit."""
    match = _LIMIT.search(text) or _LIMIT_LOG.search(text)
    if match:
        return match["type"], int(match["value"])
    if "recompile limit exceeded" in text.lower() or "recompile_limit" in text:
        return ("accumulated_recompile_limit" if "accumulated" in text else "recompile_limit"), None
    return None


# -- paths in torch's stacks --------------------------------------------------------------------
# A path in a log written on another machine cannot be checked against this interpreter's
# library roots: these parts of it mark a library (an installed package, the standard library).
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/lib/python3", "\\site-packages\\", "\\Lib\\")
_CAGTOOL_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def looks_like_user_file(filename: str) -> bool:
    """Whether a path in a stack or a compile record is the user's code, not a library's (torch's
    wrapper of a compiled module, `torch/_dynamo/external_utils.py`, is not) nor cagtool's."""
    if not filename or filename.startswith("<"):
        return False
    return not filename.startswith(_CAGTOOL_PACKAGE) and not any(part in filename for part in _LIBRARY_PARTS)



def looks_like_torch_or_stdlib_file(filename: str) -> bool:
    """Whether a path is torch's own code or Python's standard library: what torch's own machinery
    runs (compiled autograd's capture calls inspect's frames), never another library's model code
    (a transformers forward recomputed by a checkpoint inside a capture is the job's)."""
    path = (filename or "").replace("\\", "/")
    if any(part in path for part in ("/site-packages/", "/dist-packages/")):
        return any(f"{part}torch/" in path for part in ("/site-packages/", "/dist-packages/"))
    return "/lib/python3" in path or "/Lib/" in path

# -- graph-break messages ----------------------------------------------------------------------
_ID_IN_LINK = re.compile(r"/gb/gb(?P<digits>\d+)\.html")
# The first lines torch 2.13 puts before a graph break's own words: the trace's, and Dynamo's fallback
# to eager for the whole frame ("Failed to handle graph break gracefully. Skipping the function and
# falling back to eager. Graph break encountered:"), the same break logged again.
_GENERIC = ("Encountered graph break when attempting to trace", "Failed to handle graph break gracefully",
            "Encountered graph break that we cannot resume from")
_FELL_BACK = "Failed to handle graph break gracefully. Skipping the function and falling back to eager"
# A break Dynamo cannot resume after (an LSTM, a break inside a `with` block of some kinds): torch
# 2.13 compiles the frame up to it and runs the rest of the function eagerly, and counts it in
# counters["unimplemented"], never in counters["graph_break"] (word_language_model: 3 such breaks,
# its graph_break counter empty).
_UNRESUMABLE = "Encountered graph break that we cannot resume from. Compiling up to the previous resumable state, then skipping the rest of the function"


def fell_back_to_eager(reason: str) -> bool:
    """The break made Dynamo skip the whole frame: the function runs eagerly, none of it compiled."""
    return (reason or "").startswith(_FELL_BACK)


def item_break(reason: str) -> bool:
    """A graph break on `Tensor.item()` with torch._dynamo.config.capture_scalar_outputs off (torch
    2.13-2.15: "Unsupported Tensor.item() call with capture_scalar_outputs=False")."""
    return "capture_scalar_outputs=False" in reason


def unresumable_break(reason: str) -> bool:
    """Dynamo could not resume after the break: the frame's graph ends there and the rest of the
    function runs eagerly; torch's graph-break counter leaves it out."""
    return (reason or "").startswith(_UNRESUMABLE)


@dataclass(frozen=True)
class GraphBreakWords:
    """A graph break in torch's own words: the message Dynamo logs (torch/_dynamo/exc.py
    `format_graph_break_message`: a generic first line, then `gb_type`, `Explanation:`, `Hint:`
    lines and a link to the break's page), with torch's stable id (GBxxxx) from the installed
    torch's `torch/_dynamo/graph_break_registry.json`."""


    headline: str  # what to show on one line: the gb_type and explanation, not the generic first line
    gb_type: str = ""
    gb_id: str = ""  # "GB0025", when the installed torch's registry knows the gb_type
    explanation: str = ""
    hints: tuple[str, ...] = field(default_factory=tuple)

    @property
    def advice(self) -> str | None:
        return hint_advice(self.hints)


def hint_advice(hints: tuple[str, ...]) -> str | None:
    """Torch's first hint that says what to do about a break (`set torch._dynamo.config.allow_rnn =
    True`), not one of the hints torch gives every break of a class (report it, it may be a bug, it
    is fundamental); None where it gave none."""
    return next((h for h in hints if not h.startswith(_GENERIC_HINTS)), None)


# The openings of torch 2.13's hints for a class of break (torch/_dynamo/graph_break_hints.py:
# USER_ERROR, DYNAMO_BUG, DIFFICULT, FUNDAMENTAL, SUPPORTABLE, CAUSED_BY_EARLIER_GRAPH_BREAK):
# true of every break of the class, they name nothing to change.
_GENERIC_HINTS = (
    "Your code may result in an error when running in eager.",
    "This is likely to be a Dynamo bug.",
    "This graph break may be difficult to debug.",
    "This graph break is fundamental",
    "It may be possible to write Dynamo tracing rules for this code.",
    "This graph break may have been caused by an earlier graph break.",
)


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, str]:
    """gb_type -> GB id, from the installed torch's registry (read without importing torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "_dynamo" / "graph_break_registry.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {entry["Gb_type"]: gb_id for gb_id, entries in data.items() if isinstance(entries, list) for entry in entries if isinstance(entry, dict) and "Gb_type" in entry}


def graph_break_words(reason: str) -> GraphBreakWords:
    """The parts of one graph-break message; a message of another shape keeps its first line."""
    lines = [line.rstrip() for line in (reason or "").splitlines()]
    body = lines[1:] if lines and lines[0].startswith(_GENERIC) else lines
    body = [line for line in body if line.strip()]
    if not body:
        return GraphBreakWords(lines[0] if lines else "")
    gb_type = body[0].strip()
    explanation = next((line.split("Explanation:", 1)[1].strip() for line in body if line.strip().startswith("Explanation:")), "")
    hints = tuple(line.split("Hint:", 1)[1].strip() for line in body if line.strip().startswith("Hint:"))
    gb_id = ""
    link = _ID_IN_LINK.search(reason)
    if link:
        gb_id = f"GB{link.group('digits')}"
    elif gb_type in _registry():
        gb_id = _registry()[gb_type]
    headline = f"{gb_type}: {explanation}" if explanation else gb_type
    return GraphBreakWords(headline, gb_type, gb_id, explanation, hints)


# An error raised while Dynamo ran a compiled-autograd graph's node with fake tensors names the
# node's op: `call_function torch._dynamo.compiled_autograd.ops.PackPaddedSequenceBackward0(...)`
# (its generated code: `torch__dynamo_compiled_autograd_ops_PackPaddedSequenceBackward0`).
_CA_NODE_OP = re.compile(r"compiled_autograd[._]ops[._](?P<node>[A-Za-z_]\w*?Backward\d*)\b")


def ca_node_in_error(message: str) -> str | None:
    """The autograd node an error message says compiled autograd's graph failed on, or None."""
    match = _CA_NODE_OP.search(message)
    return match.group("node") if match else None


PGO_SOURCES_SHOWN = 6  # of torch's TORCH_COMPILE_DYNAMIC_SOURCES list (a BERT's backward: 150)


def pgo_shown(said: str, mode: str) -> str:
    """torch's PGO line with its list of sources cut to the first few where it is longer, saying
    how many there are and where the whole line is (a 150-source list is a 3,000-character line)."""
    match = re.search(r'TORCH_COMPILE_DYNAMIC_SOURCES="([^"]*)"', said)
    sources = match.group(1).split(",") if match else []
    if len(sources) <= PGO_SOURCES_SHOWN + 2:
        return said
    assert match is not None
    shown = ",".join(sources[:PGO_SOURCES_SHOWN])
    return (said[:match.start(1)] + shown + ",..." + said[match.end(1):]
            + f" [cagtool: {len(sources) - PGO_SOURCES_SHOWN} more of {len(sources)} sources not shown; the whole line is "
              f"options.pgo_suggestion in the {mode} record's manifest.json, and `--verify --fix torch-pgo` re-runs the job with it]")


# AOTAutograd names each compiled function's backward node class `CompiledFunctionBackward<N>`, N
# counting the process's compiled functions in the order it compiled them: two processes running
# the same graph (DDP ranks, one of which compiled an evaluation's graph first) name it with
# different numbers.
_COMPILED_FUNCTION_NUMBER = re.compile(r"^(CompiledFunctionBackward)\d+$")


def node_kind(name: str) -> str:
    """An autograd node's name without a process's compile-order number (`CompiledFunctionBackward3`
    -> `CompiledFunctionBackward`); other names as they are (`DivBackward0` and `DivBackward1`
    are two formulas of torch's)."""
    return _COMPILED_FUNCTION_NUMBER.sub(r"\1", name)
