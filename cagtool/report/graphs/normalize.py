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

from cagtool.record.graph_file import GraphNode

PLACEHOLDER = "placeholder"
SIZES_INPUT = "sizes"
# Graph inputs that `getitem` nodes index into; their labels read like the Python the user sees.
_AOT_PREFIX = re.compile(r"^aot(\d+)_")
_FX_COUNTER = re.compile(r"_\d+$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_EVAL_WITH_KEY = re.compile(r"eval_with_key>?\.\d+")
_WRAPPED = re.compile(r"^<(?:built-in function|built-in method|function|method|class) ([^ >]+)")
# print_readable's global names for the CA helper functions, e.g. torch__dynamo_external_utils_call_hook
_MANGLED = re.compile(r"^torch__dynamo_(?:external_utils|compiled_autograd_ops)_")
_REF = re.compile(r"%([A-Za-z_]\w*)")
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
    return _AOT_PREFIX.sub("", name)


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

    @property
    def key(self) -> tuple[str, str]:
        """Coarse identity: nodes with the same key can be 'the same node, changed'."""
        return (self.op, self.target)

    @property
    def signature(self) -> tuple:
        """Fine identity: equal signatures are equal nodes (up to renamed references)."""
        args = ("item of", self.input_list) if self.input_list is not None else self.args
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

    def group_nodes(self, group: OriginGroup) -> tuple[NormNode, ...]:
        return self.nodes[group.start : group.stop]


def _origin_of(node: GraphNode, previous: tuple[str | None, int | None]) -> tuple[str | None, int | None]:
    if node.origin is not None:
        return node.origin.name, node.origin.node_call
    # AOT-inlined nodes' stack traces point at user code, not at a NodeCall: they belong to the
    # CompiledFunctionBackward node whose backward they are, i.e. the group they sit in.
    if node.op != PLACEHOLDER and (node.aot_id is not None or _AOT_PREFIX.match(node.name)):
        return previous
    return None, None


def _tokenize(args: str, index_of: dict[str, int], labels: list[str]) -> tuple[str, tuple[str, ...]]:
    """(args with labels, tokens): tokens alternate literal text and `%<index>` references."""
    parts = _REF.split(normalize_target(args))
    text: list[str] = []
    tokens: list[str] = []
    for k, part in enumerate(parts):
        if k % 2:  # a reference
            position = index_of.get(part)
            if position is None:
                text.append(part)
                tokens.append("%?" + part)
            else:
                text.append(labels[position])
                tokens.append(f"%{position}")
        elif part:
            text.append(part)
            tokens.append(part)
    return "".join(text).strip(), tuple(tokens)


def fine_tokens(tokens: tuple[str, ...]) -> list[str]:
    """References kept whole, literal text split into numbers, words and punctuation."""
    out: list[str] = []
    for token in tokens:
        if token.startswith("%"):
            out.append(token)
        else:
            out.extend(_FINE_TOKEN.findall(token))
    return out


def _getitem_parts(tokens: tuple[str, ...]) -> tuple[int, str] | None:
    """(source node index, item) for `getitem(%node, i)` written as `%node, i` or `(%node, i)`."""
    match = _GETITEM_ARGS.match("".join(tokens))
    return (int(match.group(1)), match.group(2)) if match else None


def normalize_graph(nodes: Sequence[GraphNode]) -> NormGraph:
    """Label, tokenise and group one graph's nodes (linear in the number of nodes)."""
    index_of = {node.name: i for i, node in enumerate(nodes)}
    labels: list[str] = []
    out: list[NormNode] = []
    groups: list[OriginGroup] = []
    occurrences: dict[str, int] = {}
    origin: tuple[str | None, int | None] = (None, None)
    group_start = 0
    in_prologue = True
    for i, node in enumerate(nodes):
        labels.append(node.name)  # provisional, so a self-reference cannot fail
        args, tokens = _tokenize(node.args or "", index_of, labels)
        short = short_target(node.target or node.op)
        structural = _structural_label(node, short, tokens, out)
        is_input = structural is not None and structural[2]
        in_prologue = in_prologue and is_input
        # The graph opens by unpacking its inputs. Torch tags each unpacking with the autograd
        # node that first needs it, which moves with unrelated changes: keep them all in one group.
        new_origin = (None, None) if in_prologue else _origin_of(node, origin)
        if i == 0 or new_origin != origin:
            if i > 0:
                groups.append(OriginGroup(origin[0], origin[1], group_start, i))
            origin, group_start, occurrences = new_origin, i, {}
        if structural is not None:
            label, is_size = structural[0], structural[1]
        else:
            label, is_size = _counted_label(node, occurrences), False
        labels[i] = label
        out.append(
            NormNode(
                index=i,
                name=node.name,
                label=label,
                op=node.op,
                target=normalize_target(node.target or ""),
                short=short,
                args=args,
                tokens=tokens,
                origin=origin[0],
                node_call=origin[1],
                aot_id=node.aot_id,
                hook_type=node.hook_type,
                shape=tuple(node.shape) if node.shape is not None else None,
                dtype=node.dtype,
                stride=tuple(node.stride) if node.stride is not None else None,
                is_size=is_size,
                input_list=_input_list(node, tokens, out) if is_input and node.op != PLACEHOLDER else None,
            )
        )
    if nodes:
        groups.append(OriginGroup(origin[0], origin[1], group_start, len(nodes)))
    return NormGraph(tuple(out), tuple(groups))


def _structural_label(node: GraphNode, short: str, tokens: tuple[str, ...], done: list[NormNode]) -> tuple[str, bool, bool] | None:
    """(label, is_size, is_input_access) for nodes named by what they are, else None."""
    if node.op == PLACEHOLDER:
        return node.name, False, True
    if _AOT_PREFIX.match(node.name):
        return strip_aot_prefix(node.name), False, False
    if short == "getitem":
        parts = _getitem_parts(tokens)
        if parts is not None:
            source = done[parts[0]]
            from_input = source.op == PLACEHOLDER
            return f"{source.label}[{parts[1]}]", from_input and source.name == SIZES_INPUT, from_input
    if short == UNWRAP_SIZE:
        refs = [t for t in tokens if t.startswith("%") and t[1:].isdigit()]
        if len(refs) == 1 and done[int(refs[0][1:])].is_size:
            return done[int(refs[0][1:])].label, True, True
    if node.op == "output":
        return "output", False, False
    return None


def _input_list(node: GraphNode, tokens: tuple[str, ...], done: list[NormNode]) -> str | None:
    refs = [t for t in tokens if t.startswith("%") and t[1:].isdigit()]
    if not refs:
        return None
    source = done[int(refs[0][1:])]
    return source.name if source.op == PLACEHOLDER else source.input_list


def _counted_label(node: GraphNode, occurrences: dict[str, int]) -> str:
    base = _FX_COUNTER.sub("", node.name)
    seen = occurrences.get(base, 0)
    occurrences[base] = seen + 1
    return base if seen == 0 else f"{base}#{seen}"
