"""Normalise a compiled-autograd graph's nodes so that two captures can be compared structurally.

FX names carry counters that move whenever anything earlier in the graph changes (`getitem_7`
in one graph is `getitem_6` in the next), AOTAutograd's inlined nodes carry the id of their AOT
graph (`aot3_mul_1`), and targets print memory addresses or `eval_with_key.<N>` numbers. None of
that is structure. Here every node gets a *label* that survives those renames:

- `getitem` of a graph input is named after the input: `inputs[0]`, `sizes[2]`, `hooks[1]`;
  a `getitem` of another node is `<that node's label>[i]` (`sum_backward0[0]`);
- `unwrap_maybe_dynamic_int(sizes[i])` is just `sizes[i]`: it is where a size becomes symbolic;
- a node inlined from an AOT backward keeps its AOT name without the prefix (`aot3_mul_1` -> `mul_1`);
- any other node is its name without the FX counter, numbered by occurrence within its
  autograd-node group when it repeats (`add`, `add#1`).

Arguments are rewritten with those labels, so `[%getitem_6]` and `[%getitem_7]` compare equal
when both are `validate_outputs[0]`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from cagtool.record.graph_file import GraphColumns, GraphNode, graph_columns
from cagtool.torch_text import AOT_PREFIX, NODE_REF

PLACEHOLDER = "placeholder"
SIZES_INPUT = "sizes"
# Graph inputs that `getitem` nodes index into; their labels read like the Python the user sees.
_FX_COUNTER = re.compile(r"_\d+$")
_FX_COUNTER_LINES = re.compile(_FX_COUNTER.pattern, re.MULTILINE)
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_EVAL_WITH_KEY = re.compile(r"eval_with_key>?\.\d+")
_WRAPPED = re.compile(r"^<(?:built-in function|built-in method|function|method|class) ([^ >]+)")
# print_readable's global names for the CA helper functions, e.g. torch__dynamo_external_utils_call_hook
_MANGLED = re.compile(r"^torch__dynamo_(?:external_utils|compiled_autograd_ops)_")
_GETITEM_ARGS = re.compile(r"^\(?\s*%(\d+)\s*,\s*(-?\d+)\s*,?\s*\)?$")
_FINE_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[A-Za-z_][\w.]*|'[^']*'|\"[^\"]*\"|\S")
UNWRAP_SIZE = "unwrap_maybe_dynamic_int"


def normalize_target(target: str) -> str:
    """A target string without memory addresses or eval_with_key counters (comparable across runs)."""
    if "0x" not in target and "eval_with_key" not in target:
        return target  # the common case, without running two regexes
    return _EVAL_WITH_KEY.sub("eval_with_key.N", _ADDRESS.sub("", target))


@lru_cache(maxsize=4096)
def short_target(target: str) -> str:
    """What a reader calls the target: `getitem`, `SumBackward0`, `call_hook`, `aten.mul.Tensor`."""
    text = normalize_target(target)
    wrapped = _WRAPPED.match(text)
    if wrapped:
        text = wrapped.group(1)
    text = _MANGLED.sub("", text)
    if text.startswith(("aten.", "prims.")):
        return text
    return text.rsplit(".", 1)[-1] if "." in text and not text.startswith(".") else text


def strip_aot_prefix(name: str) -> str:
    return AOT_PREFIX.sub("", name)


# Not frozen: a frozen dataclass's __init__ costs ~3x more, and a 10,000-node diff builds 20,000
# of these. Treat them as immutable all the same.
@dataclass(slots=True)
class NormNode:
    """A GraphNode with stable names. `tokens` are the arguments as comparable tokens: node
    references are `%<index>` (the referenced node's position), so an aligner can compare them
    through its own mapping; `args` is the same text with labels, for people."""

    index: int
    name: str
    label: str
    op: str
    target: str
    short: str
    args: str
    tokens: tuple[str, ...]
    origin: str | None
    node_call: int | None
    aot_id: int | None = None
    hook_type: str | None = None
    shape: tuple[int | str, ...] | None = None
    dtype: str | None = None
    stride: tuple[int | str, ...] | None = None
    is_size: bool = False  # a dynamic size read from the `sizes` input
    # The graph input this node reads an item of (`inputs`, `sizes`, `hooks`...), for getitems of a
    # placeholder. Item numbers are positions in a list that shifts when anything is added before
    # them, so such nodes are compared by what they hold (shape, dtype, stride), not by index.
    input_list: str | None = None
    # What first reads such an item: (that node's autograd node, its target, the reference's place
    # among its arguments). Two items of one shape (a parameter and its .grad, both inputs of one
    # AccumulateGrad) are told apart by it where their positions moved.
    role: tuple[str | None, str, int] | None = None

    @property
    def key(self) -> tuple[str, str]:
        """Coarse identity: nodes with the same key can be 'the same node, changed'."""
        return (self.op, self.target)

    @property
    def signature(self) -> tuple:
        """Fine identity: equal signatures are equal nodes (up to renamed references)."""
        args = ("item of", self.input_list, self.role) if self.input_list is not None else self.args
        return (self.op, self.target, args, self.shape, self.dtype, self.stride, self.hook_type)

    @property
    def origin_text(self) -> str:
        if self.origin is None:
            return "graph output" if self.op == "output" else "graph inputs"
        return self.origin if self.node_call is None else f"{self.origin} (NodeCall {self.node_call})"


@dataclass(frozen=True)
class OriginGroup:
    """A contiguous run of nodes that came from one autograd node (or from none: the inputs)."""

    origin: str | None
    node_call: int | None
    start: int
    stop: int


@dataclass(frozen=True)
class NormGraph:
    nodes: tuple[NormNode, ...]
    groups: tuple[OriginGroup, ...]
    symbols: dict[str, int] | None = None  # each size symbol's value in this capture (GraphFile.symbols)

    def group_nodes(self, group: OriginGroup) -> tuple[NormNode, ...]:
        return self.nodes[group.start : group.stop]


def fine_tokens(tokens: tuple[str, ...]) -> list[str]:
    """References kept whole, literal text split into numbers, words and punctuation."""
    out: list[str] = []
    for token in tokens:
        if token.startswith("%"):
            out.append(token)
        else:
            out.extend(_FINE_TOKEN.findall(token))
    return out


def normalize_graph(nodes: Sequence[GraphNode] | GraphColumns) -> NormGraph:
    """Label, tokenise and group one graph's nodes (linear in the number of nodes).

    One loop over the graph's columns with its helpers written inline: per-node function calls
    and regexes were most of the time a 10,000-node graph took."""
    columns = nodes if isinstance(nodes, GraphColumns) else graph_columns(nodes)
    names, ops, targets, all_args = columns.names, columns.ops, columns.targets, columns.args
    origins, aot_ids, hook_types = columns.origins, columns.aot_ids, columns.hook_types
    shapes, dtypes, strides = columns.shapes, columns.dtypes, columns.strides
    index_of = {name: i for i, name in enumerate(names)}
    bases = _counter_stripped(names)
    labels: list[str] = []
    out: list[NormNode] = []
    groups: list[OriginGroup] = []
    occurrences: dict[str, int] = {}
    no_origin: tuple[str | None, int | None] = (None, None)
    origin = no_origin
    group_start = 0
    in_prologue = True
    shorts: dict[str, str] = {}
    clean_targets: dict[str, str] = {}
    split_refs = NODE_REF.split
    aot_prefix = AOT_PREFIX.match
    getitem_args = _GETITEM_ARGS.match
    # Graph-input items no node has read yet (their role: NormNode.role), and those the current node reads.
    unread: dict[int, bool] = {}
    read: list[tuple[int, int]] = []
    rows = zip(names, ops, targets, all_args, origins, aot_ids, hook_types, shapes, dtypes, strides)
    for i, (name, op, target, text, node_origin, aot_id, hook_type, shape, dtype, stride) in enumerate(rows):
        labels.append(name)  # provisional, so a self-reference cannot fail
        # The arguments with labels, and as tokens: literal text and `%<index>` references.
        text = text or ""
        if "0x" in text or "eval_with_key" in text:
            text = normalize_target(text)
        if "%" not in text:
            args = text.strip()
            tokens: tuple[str, ...] = (text,) if text else ()
        else:
            parts = iter(split_refs(text))  # literal, reference, literal, ..., literal
            literal = next(parts)
            pieces = [literal] if literal else []
            found = pieces[:]
            for place, (reference, literal) in enumerate(zip(parts, parts)):
                position = index_of.get(reference)
                if position is None:
                    pieces.append(reference)
                    found.append("%?" + reference)
                else:
                    pieces.append(labels[position])
                    found.append(f"%{position}")
                    if position in unread:
                        read.append((position, place))
                if literal:
                    pieces.append(literal)
                    found.append(literal)
            args = "".join(pieces).strip()
            tokens = tuple(found)
        what = target or op
        short = shorts.get(what)
        if short is None:
            short = shorts[what] = short_target(what)
        # Nodes named by what they are (structural labels).
        label: str | None = None
        is_size = is_input = False
        aot = None
        if op == PLACEHOLDER:
            label, is_input = name, True
        else:
            aot = aot_prefix(name) if name.startswith("aot") else None
            if aot is not None:
                label = name[aot.end() :]
            else:
                if short == "getitem":
                    item = getitem_args("".join(tokens))
                    if item is not None:
                        source = out[int(item.group(1))]
                        is_input = source.op == PLACEHOLDER
                        label, is_size = f"{source.label}[{item.group(2)}]", is_input and source.name == SIZES_INPUT
                if label is None and short == UNWRAP_SIZE:
                    refs = [t for t in tokens if t.startswith("%") and t[1:].isdigit()]
                    if len(refs) == 1 and out[int(refs[0][1:])].is_size:
                        label, is_size, is_input = out[int(refs[0][1:])].label, True, True
                if label is None and op == "output":
                    label = "output"
        in_prologue = in_prologue and is_input
        # The graph opens by unpacking its inputs. Torch tags each unpacking with the autograd
        # node that first needs it, which moves with unrelated changes: keep them all in one group.
        if in_prologue:
            new_origin = no_origin
        elif node_origin is not None:
            new_origin = node_origin
        elif op != PLACEHOLDER and (aot_id is not None or aot is not None):
            # AOT-inlined nodes' stack traces point at user code, not at a NodeCall: they belong to
            # the CompiledFunctionBackward node whose backward they are, i.e. the group they sit in.
            new_origin = origin
        else:
            new_origin = no_origin
        if i == 0 or new_origin != origin:
            if i > 0:
                groups.append(OriginGroup(origin[0], origin[1], group_start, i))
            origin, group_start, occurrences = new_origin, i, {}
        if label is None:  # the name without its FX counter, numbered by occurrence in the group
            base = bases[i]
            seen = occurrences.get(base, 0)
            occurrences[base] = seen + 1
            label = base if seen == 0 else f"{base}#{seen}"
        labels[i] = label
        input_list = None
        if is_input and op != PLACEHOLDER:
            for t in tokens:
                if t.startswith("%") and t[1:].isdigit():
                    source = out[int(t[1:])]
                    input_list = source.name if source.op == PLACEHOLDER else source.input_list
                    break
        if read:
            if not is_input:  # the items it is the first to read
                for position, place in read:
                    if unread.pop(position, False):
                        out[position].role = (origin[0], short, place)
            read.clear()
        clean = clean_targets.get(target)
        if clean is None:
            clean = clean_targets[target] = normalize_target(target or "")
        out.append(
            NormNode(
                i,
                name,
                label,
                op,
                clean,
                short,
                args,
                tokens,
                origin[0],
                origin[1],
                aot_id,
                hook_type,
                tuple(shape) if shape is not None else None,
                dtype,
                tuple(stride) if stride is not None else None,
                is_size,
                input_list,
            )
        )
        if input_list is not None:
            unread[i] = True
    if names:
        groups.append(OriginGroup(origin[0], origin[1], group_start, len(names)))
    return NormGraph(tuple(out), tuple(groups), columns.symbols)


def _counter_stripped(names: list[str]) -> list[str]:
    """`_FX_COUNTER.sub("", name)` for each name (`getitem_7` -> `getitem`), as one regex pass over
    the names joined by newlines where no name holds one (`$` then matches where it would alone)."""
    joined = "\n".join(names)
    if joined.count("\n") != len(names) - 1:
        return [_FX_COUNTER.sub("", name) for name in names]
    return _FX_COUNTER_LINES.sub("", joined).split("\n") if names else []
