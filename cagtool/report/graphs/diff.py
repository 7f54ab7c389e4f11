"""A structural diff of two compiled-autograd graphs: pure functions from node lists to a GraphDiff.

A CA graph is a sequence of autograd nodes, each expanded into a few FX nodes (an *origin
group*), so alignment goes from coarse to fine:

1. whole groups are matched by content: every unchanged group is settled at once;
2. the groups left are aligned by autograd-node name, so a new `MulBackward0` is one inserted
   group, not a shift of everything after it;
3. inside a pair of groups (or a stretch of groups that changed) FX nodes are aligned on their
   full normalised signature, then, in what is left, on (op, target) alone: a node that keeps
   its op and target but not its arguments, shape, dtype, stride or hook is *changed*; a lone
   node replaced by a lone node (`AddBackward0` -> `SubBackward0`) is changed too.

Finally references are compared through the alignment: `add_backward0[0]` and `sub_backward0[0]`
are the same input when the two nodes were aligned, so one change does not ripple into every
node downstream of it. Each level uses `align.opcodes` (patience diff).
"""

from __future__ import annotations

import ast
import gc
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from itertools import repeat
from typing import Iterator, Sequence

from cagtool.record.graph_file import GraphColumns, GraphNode
from cagtool.report.graphs.normalize import NormGraph, NormNode, OriginGroup, fine_tokens, normalize_graph
from cagtool.report.graphs.align import opcodes

EQUAL = "equal"
INSERTED = "inserted"
REMOVED = "removed"
CHANGED = "changed"



@dataclass(frozen=True)
class FieldChange:
    field: str
    old: str
    new: str
    # A shape or stride judged by its sizes' values (_by_value): each side's values
    old_values: list[int] | None = None
    new_values: list[int] | None = None
    # Its dims share symbols otherwise on the two sides (`[s39, s82]` -> `[s39, s39]`: duck sizing
    # tied two sizes that came equal): other sizes and another specialisation, not sizes alone
    ties_changed: bool = False


@dataclass(frozen=True)
class NodeDiff:
    kind: str  # EQUAL | INSERTED | REMOVED | CHANGED
    old: NormNode | None
    new: NormNode | None
    changes: tuple[FieldChange, ...] = ()


@dataclass(frozen=True)
class SymbolicSize:
    """A size that was a number in the old graph and is a symbol (a `sizes[i]` input) in the new."""

    node: str  # label of the node in the new graph
    where: str  # "args", "shape[1]", "stride[0]"
    old: str
    new: str


@dataclass(frozen=True)
class GraphDiffSummary:
    old_nodes: int
    new_nodes: int
    equal: int
    inserted: int
    removed: int
    changed: int
    op_histogram_delta: dict[str, int]  # short target -> new count minus old count, non-zero only
    autograd_nodes_added: list[str]  # "MulBackward0 (NodeCall 2)", from the new graph
    autograd_nodes_removed: list[str]  # from the old graph
    hooks_added: list[str]  # hook types of inserted call_hook nodes
    hooks_removed: list[str]
    became_symbolic: list[SymbolicSize] = field(default_factory=list)
    # Of the changed: nodes whose only change is their symbolic sizes' values, the same code
    # captured for other sizes (_by_value)
    resized: int = 0


@dataclass(frozen=True)
class GraphDiff:
    old: NormGraph
    new: NormGraph
    entries: tuple[NodeDiff, ...]
    summary: GraphDiffSummary

    @property
    def identical(self) -> bool:
        s = self.summary
        return s.inserted == 0 and s.removed == 0 and s.changed == s.resized  # the same code, whatever sizes it was captured for


def diff_graphs(old: Sequence[GraphNode] | GraphColumns | NormGraph, new: Sequence[GraphNode] | GraphColumns | NormGraph) -> GraphDiff:
    """Align two graphs and summarise what differs. Accepts raw nodes, their columns or normalised graphs."""
    with cyclic_gc_paused():
        old_graph = old if isinstance(old, NormGraph) else normalize_graph(old)
        new_graph = new if isinstance(new, NormGraph) else normalize_graph(new)
        raw = _align_groups(old_graph, new_graph)
        mapping = {e.old.index: e.new.index for e in raw if e.old is not None and e.new is not None}
        # Nodes aligned on their full signature are equal (nothing _compare could find): only the
        # pairs aligned on (op, target) alone are compared field by field.
        symbols = SymbolRenaming()
        entries = tuple([_compare(e, mapping, symbols) if e.kind == CHANGED else e for e in raw])
        if old_graph.symbols and new_graph.symbols:
            memos: tuple[dict[int | str, int | None], dict[int | str, int | None]] = ({}, {})
            entries = tuple([_by_value(e, old_graph.symbols, new_graph.symbols, memos) for e in entries])
        return GraphDiff(old_graph, new_graph, entries, _summarise(old_graph, new_graph, entries, mapping))


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """A diff allocates tens of objects per node, none in reference cycles; the cyclic collector
    would rescan all of them again and again (a third of the time on 50,000 nodes, and as much
    while reading the graph files and rendering)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _node_diff(kind: str, old: NormNode | None, new: NormNode | None) -> NodeDiff:
    """NodeDiff(kind, old, new) without the frozen dataclass's per-field object.__setattr__ (a
    diff builds one per node); NodeDiff has no __post_init__."""
    entry = _new_object(NodeDiff)
    entry.__dict__.update(kind=kind, old=old, new=new, changes=())
    return entry


_new_object = object.__new__


def _align_groups(old: NormGraph, new: NormGraph) -> list[NodeDiff]:
    # Pass 1: whole groups by content, which settles every unchanged group.
    # Pass 2: what is left, by autograd-node name.
    out: list[NodeDiff] = []
    # Each signature as a small int (equal signatures, equal ints): a group's content is then a
    # tuple of ints, hashed and compared without walking every node's signature again.
    ids: dict[tuple, int] = {}
    old_signatures = [ids.setdefault(n.signature, len(ids)) for n in old.nodes]
    new_signatures = [ids.setdefault(n.signature, len(ids)) for n in new.nodes]
    old_content = [(g.origin, tuple(old_signatures[g.start : g.stop])) for g in old.groups]
    new_content = [(g.origin, tuple(new_signatures[g.start : g.stop])) for g in new.groups]
    old_nodes, new_nodes = old.nodes, new.nodes
    for tag, i1, i2, j1, j2 in opcodes(old_content, new_content):
        if tag == "equal":
            if i2 > i1:  # equal groups have equal lengths: one stretch of nodes on each side
                start, stop, other = old.groups[i1].start, old.groups[i2 - 1].stop, new.groups[j1].start
                out.extend(map(_node_diff, repeat(EQUAL, stop - start), old_nodes[start:stop], new_nodes[other : other + stop - start]))
        else:
            out.extend(_align_groups_by_name(old, old.groups[i1:i2], new, new.groups[j1:j2], old_signatures, new_signatures))
    return out


def _align_groups_by_name(
    old: NormGraph, old_groups: Sequence[OriginGroup], new: NormGraph, new_groups: Sequence[OriginGroup], old_signatures: list[int], new_signatures: list[int]
) -> list[NodeDiff]:
    out: list[NodeDiff] = []
    old_keys = [g.origin or "" for g in old_groups]
    new_keys = [g.origin or "" for g in new_groups]
    for tag, i1, i2, j1, j2 in opcodes(old_keys, new_keys):
        if tag == "equal":
            for og, ng in zip(old_groups[i1:i2], new_groups[j1:j2]):
                out.extend(_align_nodes(old.group_nodes(og), new.group_nodes(ng), old_signatures[og.start : og.stop], new_signatures[ng.start : ng.stop]))
        else:
            a, b = (old_groups[i1].start, old_groups[i2 - 1].stop) if i2 > i1 else (0, 0)
            c, d = (new_groups[j1].start, new_groups[j2 - 1].stop) if j2 > j1 else (0, 0)
            out.extend(_align_nodes(old.nodes[a:b], new.nodes[c:d], old_signatures[a:b], new_signatures[c:d]))
    return out


def _align_nodes(old: Sequence[NormNode], new: Sequence[NormNode], old_signatures: Sequence[int], new_signatures: Sequence[int]) -> list[NodeDiff]:
    out: list[NodeDiff] = []
    for tag, i1, i2, j1, j2 in opcodes(old_signatures, new_signatures):
        if tag == "equal":
            out.extend(_node_diff(EQUAL, o, n) for o, n in zip(old[i1:i2], new[j1:j2]))
        else:
            out.extend(_align_coarse(old[i1:i2], new[j1:j2]))
    return out


def _align_coarse(old: Sequence[NormNode], new: Sequence[NormNode]) -> list[NodeDiff]:
    out: list[NodeDiff] = []
    for tag, i1, i2, j1, j2 in opcodes([n.key for n in old], [n.key for n in new]):
        if tag == "equal" or (tag == "replace" and i2 - i1 == 1 and j2 - j1 == 1 and old[i1].op == new[j1].op):
            out.extend(NodeDiff(CHANGED, o, n) for o, n in zip(old[i1:i2], new[j1:j2]))
        else:
            out.extend(NodeDiff(REMOVED, o, None) for o in old[i1:i2])
            out.extend(NodeDiff(INSERTED, None, n) for n in new[j1:j2])
    return out


def _same_tokens(old: NormNode, new: NormNode, mapping: dict[int, int]) -> bool:
    if len(old.tokens) != len(new.tokens):
        return False
    for a, b in zip(old.tokens, new.tokens):
        if a == b and not a.startswith("%"):
            continue
        if a.startswith("%") and b.startswith("%") and a[1:].isdigit() and b[1:].isdigit():
            if mapping.get(int(a[1:])) == int(b[1:]):
                continue
        elif a == b:  # unresolved references with the same name
            continue
        return False
    return True


def _text(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


# A size symbol as torch names it: s0, s33 (backed), u0 (unbacked), and the other prefixes of
# torch.utils._sympy.symbol.SymT.
_SYMBOL = re.compile(r"\b[a-z]+\d+\b")


class SymbolRenaming:
    """The size symbols of one graph read as those of the other: each capture numbers its symbols
    afresh, so `s0` in one graph and `s1` in the next may be the same size. A renaming is kept only
    while it is one to one over the whole diff; a symbol that would stand for two is a change."""

    def __init__(self) -> None:
        self.forward: dict[str, str] = {}
        self.backward: dict[str, str] = {}

    def same(self, a: object, b: object) -> bool:
        """Whether two sizes (or size expressions) are equal up to the renaming, extending it. The
        same text holding a symbol is checked too: `s58` after `s58 -> s38` is another size."""
        if not isinstance(a, str) or not isinstance(b, str):
            return a == b
        if a == b and not _SYMBOL.search(a):
            return True
        old, new = _SYMBOL.findall(a), _SYMBOL.findall(b)
        if len(old) != len(new) or _SYMBOL.sub("#", a) != _SYMBOL.sub("#", b):
            return False
        pairs = list(zip(old, new))
        for x, y in pairs:
            if self.forward.get(x, y) != y or self.backward.get(y, x) != x:
                return False
        for x, y in pairs:
            self.forward[x], self.backward[y] = y, x
        return True

    def same_sizes(self, a: Sequence[int | str], b: Sequence[int | str]) -> bool:
        return len(a) == len(b) and all(self.same(x, y) for x, y in zip(a, b))


def _compare(entry: NodeDiff, mapping: dict[int, int], symbols: SymbolRenaming | None = None) -> NodeDiff:
    old, new = entry.old, entry.new
    if old is None or new is None:
        return entry
    changes: list[FieldChange] = []
    if old.target != new.target:
        changes.append(FieldChange("target", old.short, new.short))
    # Equal text is equal args even when a reference's node was not aligned: saying
    # "changed" over two identical lines helps nobody.
    renumbered_input = old.input_list is not None and old.input_list == new.input_list
    if old.args != new.args and not renumbered_input and not _same_tokens(old, new, mapping):
        changes.append(FieldChange("args", old.args, new.args))
    symbols = symbols if symbols is not None else SymbolRenaming()
    for name in ("shape", "dtype", "stride"):
        a, b = getattr(old, name), getattr(new, name)
        # Unknown is not changed: a side that recorded no metadata for the node (a graph read
        # back from a log, a tensor whose metadata capture could not take) says nothing about it.
        if a is None or b is None or a == b:
            continue
        if name != "dtype" and symbols.same_sizes(a, b):
            continue  # the same sizes under other symbol names
        changes.append(FieldChange(name, _text(a), _text(b)))
    if old.hook_type != new.hook_type:
        changes.append(FieldChange("hook_type", _text(old.hook_type), _text(new.hook_type)))
    if not changes:
        return NodeDiff(EQUAL, old, new)
    return NodeDiff(CHANGED, old, new, tuple(changes))


_SIZE_LIMIT = 1 << 64  # no tensor has a size or stride past this: a larger figure is no size


def size_value(size: int | str, symbols: dict[str, int]) -> int | None:
    """A size's value in its capture: an int as it is, a symbol or an expression of symbols (`s20**2`,
    `s35*s36`, as sympy prints them) with each symbol's recorded value; None where a name has no
    value (an unbacked `u0`) or the text is not plain integer arithmetic within a size's range (a
    record is read as untrusted: nothing in it is run, and no figure grows past _SIZE_LIMIT)."""
    if isinstance(size, int):
        return size
    if len(size) > 200:
        return None
    try:
        tree = ast.parse(size, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None
    try:
        return _size_of(tree, symbols)
    except RecursionError:
        return None


def _size_of(node: ast.AST, symbols: dict[str, int]) -> int | None:
    if isinstance(node, ast.Constant):
        value = node.value
        return value if type(value) is int else None
    if isinstance(node, ast.Name):
        value = symbols.get(node.id)
        return value if type(value) is int and abs(value) < _SIZE_LIMIT else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _size_of(node.operand, symbols)
        return None if inner is None else -inner
    if not isinstance(node, ast.BinOp):
        return None
    left, right = _size_of(node.left, symbols), _size_of(node.right, symbols)
    if left is None or right is None:
        return None
    op = node.op
    if isinstance(op, ast.Add):
        value = left + right
    elif isinstance(op, ast.Sub):
        value = left - right
    elif isinstance(op, ast.Mult):
        value = left * right
    elif isinstance(op, ast.FloorDiv) and right:
        value = left // right
    elif isinstance(op, ast.Pow) and 0 <= right <= 64 and abs(left) < _SIZE_LIMIT:
        value = left**right
    else:
        return None
    return value if abs(value) < _SIZE_LIMIT else None


def _values(sizes: Sequence[int | str], symbols: dict[str, int], memo: dict[int | str, int | None]) -> list[int] | None:
    """Each size's value; `memo` holds the graph's sizes read so far (a graph repeats a few sizes on
    thousands of nodes: each text is parsed once)."""
    values = []
    for size in sizes:
        if size not in memo:
            memo[size] = size_value(size, symbols)
        values.append(memo[size])
    return None if None in values else values  # type: ignore[return-value]


# The order _compare lists a node's changed fields in
_FIELD_ORDER = {"target": 0, "args": 1, "shape": 2, "dtype": 3, "stride": 4, "hook_type": 5}


def _ties(sizes: Sequence[int | str]) -> list[int]:
    """Which earlier dim each dim shares its symbol (or expression) with: [s58, s58] -> [0, 0], [s38, s58] -> [0, 1]."""
    first: dict[int | str, int] = {}
    return [first.setdefault(size, i) if isinstance(size, str) else i for i, size in enumerate(sizes)]


def _by_value(entry: NodeDiff, old_symbols: dict[str, int], new_symbols: dict[str, int],
              memos: tuple[dict[int | str, int | None], dict[int | str, int | None]]) -> NodeDiff:
    """Shape and stride judged by the sizes' values where both graphs recorded their symbols'. Each
    capture names its symbols afresh and duck-sizes equal sizes into one symbol: the same text may be
    other sizes (`[s35, 1, s20, s20]`: 64 rows in one graph, 8 in the next) and other text the same
    sizes (`s35*s36**2` and `s36**2*s74`). A size that became symbolic stays a change of its own."""
    old, new = entry.old, entry.new
    if old is None or new is None or entry.kind not in (EQUAL, CHANGED):
        return entry
    changes = {c.field: c for c in entry.changes}
    touched = False
    for name in ("shape", "stride"):
        a, b = getattr(old, name), getattr(new, name)
        if a is None or b is None or len(a) != len(b) or all(type(x) is int for x in (*a, *b)):
            continue
        if [type(x) for x in a] != [type(x) for x in b]:
            continue  # a number that became a symbol (or back): the text's change says so
        ties_changed = _ties(a) != _ties(b)
        va, vb = _values(a, old_symbols, memos[0]), _values(b, new_symbols, memos[1])
        if va is None or vb is None or (ties_changed and va == vb):
            continue  # dims that shared a symbol and no longer do, at the same values: the text's change says so
        if ties_changed:
            changes[name] = FieldChange(name, _text(a), _text(b), va, vb, ties_changed=True)
            touched = True
        elif va == vb:
            touched |= changes.pop(name, None) is not None
        else:
            changes[name] = FieldChange(name, _text(a), _text(b), va, vb)
            touched = True
    if not touched:
        return entry
    kept = tuple(sorted(changes.values(), key=lambda c: _FIELD_ORDER.get(c.field, len(_FIELD_ORDER))))
    return NodeDiff(CHANGED, old, new, kept) if kept else NodeDiff(EQUAL, old, new)


def _histogram(graph: NormGraph) -> Counter[str]:
    return Counter(n.short for n in graph.nodes if n.op not in ("placeholder", "output"))


def _autograd_nodes(graph: NormGraph) -> Counter[str]:
    """How many autograd nodes of each name the graph has (one per NodeCall)."""
    return Counter(name for name, _ in dict.fromkeys((g.origin, g.node_call) for g in graph.groups if g.origin is not None))


def _added_and_removed(old: NormGraph, new: NormGraph, old_to_new: dict[int, int], new_to_old: dict[int, int]) -> tuple[list[str], list[str]]:
    """The autograd nodes added and removed, by name counts first: a name the two graphs have as
    many of is neither, whatever the alignment left unmatched (an insertion before the parameters'
    AccumulateGrads shifts their NodeCalls, and the alignment may pair five of six and leave one a
    side). Of a name whose count changed, the alignment's unmatched nodes name which NodeCalls."""
    counts_old, counts_new = _autograd_nodes(old), _autograd_nodes(new)

    def kept(unmatched: list[tuple[str, int | None]], more: Counter[str]) -> list[str]:
        left = dict(more)
        shown = []
        for name, call in unmatched:
            if left.get(name, 0) > 0:
                left[name] -= 1
                shown.append(name if call is None else f"{name} (NodeCall {call})")
        # The count is the graphs' own: where the alignment paired more of a name than stayed the
        # same (it matched a removed node's FX nodes to a kept one's), the rest go without a NodeCall.
        for name, count in left.items():
            shown += [name] * count
        return shown

    gained, lost = counts_new - counts_old, counts_old - counts_new  # Counter subtraction keeps the positive counts
    return (kept(_unmatched_autograd_nodes(new, old, new_to_old), gained),
            kept(_unmatched_autograd_nodes(old, new, old_to_new), lost))


def _unmatched_autograd_nodes(graph: NormGraph, other: NormGraph, partner: dict[int, int]) -> list[tuple[str, int | None]]:
    """Autograd nodes of `graph` (name, NodeCall) none of whose FX nodes is aligned with a node of
    the same autograd-node name in `other`: the candidates for the ones added (or, the other way
    round, removed). Going by the alignment names the right NodeCall when a model gains a layer."""
    matched: set[tuple[str, int | None]] = set()
    order: dict[tuple[str, int | None], None] = {}
    other_nodes = other.nodes
    for group in graph.groups:  # a group's nodes share its autograd node: one look each, mostly
        if group.origin is None:
            continue
        key = (group.origin, group.node_call)
        order.setdefault(key)
        if key in matched:
            continue
        for index in range(group.start, group.stop):
            other_index = partner.get(index)
            if other_index is not None and other_nodes[other_index].origin == group.origin:
                matched.add(key)
                break
    return [(name, call) for name, call in order if (name, call) not in matched]


def symbolic_sizes(old: NormNode, new: NormNode, new_graph: NormGraph) -> list[SymbolicSize]:
    """Sizes that were numbers in `old` and are symbols in `new`: from the shape and stride when
    capture recorded them, and from the arguments (a literal replaced by a `sizes[i]` input)."""
    found: list[SymbolicSize] = []
    for name in ("shape", "stride"):
        a, b = getattr(old, name), getattr(new, name)
        if a is not None and b is not None and len(a) == len(b):
            for dim, (x, y) in enumerate(zip(a, b)):
                if isinstance(x, int) and isinstance(y, str):
                    found.append(SymbolicSize(new.label, f"{name}[{dim}]", str(x), y))
    old_tokens, new_tokens = fine_tokens(old.tokens), fine_tokens(new.tokens)
    matcher = SequenceMatcher(None, old_tokens, new_tokens, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "replace":
            continue
        numbers = [t for t in old_tokens[i1:i2] if t != ","]
        symbols = [t for t in new_tokens[j1:j2] if t != ","]
        if len(numbers) != len(symbols) or not all(t.lstrip("-").isdigit() for t in numbers):
            continue
        if not all(t.startswith("%") and t[1:].isdigit() and new_graph.nodes[int(t[1:])].is_size for t in symbols):
            continue
        for number, symbol in zip(numbers, symbols):
            found.append(SymbolicSize(new.label, "args", number, new_graph.nodes[int(symbol[1:])].label))
    return found


def _summarise(old: NormGraph, new: NormGraph, entries: tuple[NodeDiff, ...], old_to_new: dict[int, int]) -> GraphDiffSummary:
    kinds = Counter(e.kind for e in entries)
    delta = _histogram(new)
    delta.subtract(_histogram(old))
    new_to_old = {n: o for o, n in old_to_new.items()}
    symbolic: list[SymbolicSize] = []
    for e in entries:
        if e.kind == CHANGED and e.old is not None and e.new is not None:
            symbolic.extend(symbolic_sizes(e.old, e.new, new))
    added, removed = _added_and_removed(old, new, old_to_new, new_to_old)
    return GraphDiffSummary(
        old_nodes=len(old.nodes),
        new_nodes=len(new.nodes),
        equal=kinds[EQUAL],
        inserted=kinds[INSERTED],
        removed=kinds[REMOVED],
        changed=kinds[CHANGED],
        op_histogram_delta={k: v for k, v in sorted(delta.items()) if v != 0},
        autograd_nodes_added=added,
        autograd_nodes_removed=removed,
        hooks_added=[e.new.hook_type or e.new.short for e in entries if e.kind == INSERTED and e.new is not None and _is_hook(e.new)],
        hooks_removed=[e.old.hook_type or e.old.short for e in entries if e.kind == REMOVED and e.old is not None and _is_hook(e.old)],
        became_symbolic=symbolic,
        resized=sum(1 for e in entries if e.kind == CHANGED and e.changes and all(c.old_values is not None and not c.ties_changed for c in e.changes)),
    )


def _is_hook(node: NormNode) -> bool:
    return node.hook_type is not None or node.short == "call_hook"
