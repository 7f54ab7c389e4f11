"""Reads a compiled-autograd graph back from the code torch logs (`compiled_autograd_graph`
payload: the GraphModule's readable code) into the record's structured form, the same
GraphSummary the capture side builds from the live GraphModule, so diff-graphs reads both.

What the code holds: one assignment per FX node (`name = target(args);  dead = None`), the
placeholders as `forward`'s parameters, the output as `return`, and before each group of nodes a
`# File: ... code: <AutogradNode> (NodeCall <k>)` comment naming the autograd node they came from
(torch's set_node_origin). What it does not hold: shapes, dtypes and strides (left None), and
the dotted name of each target (FX writes `torch._dynamo.external_utils.call_hook` as
`torch__dynamo_external_utils_call_hook`; the known prefixes are mapped back).
"""

from __future__ import annotations

import re
from collections import Counter

from cagtool.capture.observe.graph_dump import GraphSummary, short_op
from cagtool.record.graph_file import GraphNode
from cagtool.record.schema import AutogradNodeRef, HookRef
from cagtool.torch_text import aot_graph_id, graph_class_id, node_origin_in_comment

_ASSIGN = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\s*:\s*\"[^\"]*\")? = (?P<rhs>.*)$")
_CALL = re.compile(r"^(?P<target>[A-Za-z_][A-Za-z0-9_.]*)\((?P<args>.*)\)$", re.S)
_SUBSCRIPT = re.compile(r"^(?P<base>[A-Za-z_][A-Za-z0-9_]*)\[(?P<index>.*)\]$")
_ATTR = re.compile(r"^self\.(?P<attr>[A-Za-z0-9_.]+)$")
_IDENT = re.compile(r"(?<![\w.'\"%])([A-Za-z_][A-Za-z0-9_]*)(?![\w'\"(])")
_KWARG = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*) = ")
_HOOK_TYPE = re.compile(r"hook_type\s*=\s*'([^']*)'")

# FX's codegen turns a target's qualified name into one identifier (dots become underscores).
_MANGLED_PREFIXES = (
    ("torch__dynamo_compiled_autograd_ops_", "torch._dynamo.compiled_autograd.ops."),
    ("torch__dynamo_external_utils_", "torch._dynamo.external_utils."),
    ("torch__dynamo_compiled_autograd_", "torch._dynamo.compiled_autograd."),
    ("torch__C__dynamo_compiled_autograd_", "torch._C._dynamo.compiled_autograd."),
    ("torch__functorch_", "torch._functorch."),
    ("torch__ops_", "torch._ops."),
)
_OPERATORS = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "/": "truediv", "%": "mod", "**": "pow"}
_BINARY = re.compile(r"^(?P<a>[A-Za-z0-9_.]+) (?P<op>\*\*|//|[+\-*/%]) (?P<b>[A-Za-z0-9_.]+)$")


def demangle(name: str) -> str:
    if name.startswith("torch.ops."):
        return name[len("torch.ops.") :]  # aten.mm.default, as str(OpOverload) prints it
    for mangled, dotted in _MANGLED_PREFIXES:
        if name.startswith(mangled):
            return dotted + name[len(mangled) :]
    return name


def ca_id_of(code: str) -> int | None:
    """N from `class CompiledAutograd<N>(torch.nn.Module):` (the graph's compiled-autograd id)."""
    return graph_class_id(code)


def _split_params(text: str) -> list[str]:
    names = []
    for part in text.split(","):
        name = part.split(":")[0].split("=")[0].strip()
        if name and name != "self":
            names.append(name)
    return names


def _refs(args: str, known: set[str]) -> str:
    """Arguments with references to other nodes written `%name`, keyword arguments as `k=v`
    (how the capture side renders them)."""
    args = _KWARG.sub(r"\1=", args)
    return _IDENT.sub(lambda m: f"%{m.group(1)}" if m.group(1) in known else m.group(1), args)


def parse_graph_code(code: str) -> GraphSummary:
    nodes: list[GraphNode] = []
    known: set[str] = set()
    histogram: Counter[str] = Counter()
    autograd: dict[int, str] = {}
    aot_ids: set[int] = set()
    hooks: list[HookRef] = []
    num_sizes = 0
    origin: AutogradNodeRef | None = None
    for raw in code.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            found = node_origin_in_comment(line)
            if found:
                origin = AutogradNodeRef(node_call=found[0], name=found[1])
            elif "No stacktrace found" in line:
                origin = None
            continue
        if line.startswith("def forward("):
            inner = line[len("def forward(") : line.rfind(")")]
            for name in _split_params(inner):
                known.add(name)
                nodes.append(GraphNode(name=name, op="placeholder", target=name))
            continue
        if line.startswith("return"):
            value = line[len("return") :].strip()
            nodes.append(GraphNode(name="output", op="output", target="output", args=_refs(value, known)))
            continue
        if line.startswith("class ") or line.startswith("@"):
            continue
        statement = line.split(";  ", 1)[0]
        match = _ASSIGN.match(statement)
        if not match:
            continue
        name, rhs = match.group("name"), match.group("rhs").strip()
        op, target, args = _classify(rhs, known)
        known.add(name)
        if origin is not None:
            autograd.setdefault(origin.node_call, origin.name)
        aot_id = aot_graph_id(name)
        if aot_id is not None:
            aot_ids.add(aot_id)
        hook_match = _HOOK_TYPE.search(args) if op == "call_function" else None
        hook_type = hook_match.group(1) if hook_match else None
        if hook_type is not None:
            hooks.append(HookRef(name=name, hook_type=hook_type))
        if op == "call_function" and target.endswith("unwrap_maybe_dynamic_int"):
            num_sizes += 1
        if op in ("call_function", "call_method", "call_module"):
            histogram[short_op(op, target)] += 1
        nodes.append(GraphNode(name=name, op=op, target=target, args=args, origin=origin, aot_id=aot_id, hook_type=hook_type))
    return GraphSummary.from_tallies(nodes, histogram, autograd, aot_ids, hooks, num_sizes)


def _classify(rhs: str, known: set[str]) -> tuple[str, str, str]:
    """(op, target, args) of one node's right-hand side."""
    match = _SUBSCRIPT.match(rhs)
    if match and match.group("base") in known:
        return "call_function", "_operator.getitem", f"%{match.group('base')}, {_refs(match.group('index'), known)}"
    match = _ATTR.match(rhs)
    if match:
        return "get_attr", match.group("attr"), ""
    match = _CALL.match(rhs)
    if match:
        target, args = match.group("target"), match.group("args")
        head, _, method = target.partition(".")
        if method and head in known:
            # x.view(...): a method call on another node
            rest = _refs(args, known)
            return "call_method", method, f"%{head}" + (f", {rest}" if rest else "")
        return "call_function", demangle(target), _refs(args, known)
    match = _BINARY.match(rhs)
    if match:
        return "call_function", f"_operator.{_OPERATORS[match.group('op')]}", _refs(f"{match.group('a')}, {match.group('b')}", known)
    return "call_function", "expression", _refs(rhs, known)
