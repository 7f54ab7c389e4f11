"""Turns a compiled-autograd GraphModule into the record's structured form (GraphNode list,
op histogram, autograd nodes covered, inlined AOT graphs, hooks)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from cagtool.record.graph_file import GraphNode
from cagtool.record.schema import AutogradNodeRef, HookRef
from cagtool.torch_text import aot_graph_id, node_origin

# CA traces through placeholder tensors of this size (allocate_dummy): their shapes mean nothing.
_DUMMY_SIZE = 123456789


@dataclass(frozen=True)
class GraphSummary:
    nodes: list[GraphNode]
    op_histogram: dict[str, int]
    autograd_nodes: list[AutogradNodeRef]
    aot_ids: list[int]
    hooks: list[HookRef]
    num_sizes: int

    @classmethod
    def from_tallies(
        cls, nodes: list[GraphNode], histogram: Counter[str], autograd: dict[int, str], aot_ids: set[int], hooks: list[HookRef], num_sizes: int
    ) -> "GraphSummary":
        """The one ordering of a graph's tallies, whether they came from a live GraphModule or a log."""
        return cls(
            nodes=nodes,
            op_histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
            autograd_nodes=[AutogradNodeRef(node_call=k, name=v) for k, v in sorted(autograd.items())],
            aot_ids=sorted(aot_ids),
            hooks=hooks,
            num_sizes=num_sizes,
        )


def target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None)
    module = getattr(target, "__module__", None)
    if hasattr(target, "_schema") or type(target).__name__ == "OpOverload":
        return str(target)  # aten.mm.default
    if name and module:
        return f"{module}.{name}"
    return str(target)


def short_op(node_op: str, target: str) -> str:
    """The histogram key: `aten.mm`, `call_hook`, `accumulate_grad_`..."""
    if node_op != "call_function":
        return node_op
    text = target
    if text.startswith("aten.") or text.startswith("inductor."):
        return ".".join(text.split(".")[:2])
    return text.rsplit(".", 1)[-1]


def _origin(meta: dict[str, Any]) -> AutogradNodeRef | None:
    trace = meta.get("stack_trace") or ""
    last = trace.strip().splitlines()[-1] if trace.strip() else ""
    # set_node_origin makes "<name>[aot_id] (NodeCall <k>)" the last line of the stack trace.
    found = node_origin(last)
    return AutogradNodeRef(node_call=found[0], name=found[1]) if found else None


def _render_arg(arg: Any) -> str:
    import torch.fx

    if isinstance(arg, torch.fx.Node):
        return f"%{arg.name}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(_render_arg(a) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_render_arg(v)}" for k, v in arg.items()) + "}"
    return repr(arg)


def _render_args(node: Any) -> str:
    parts = [_render_arg(a) for a in node.args]
    parts += [f"{k}={_render_arg(v)}" for k, v in node.kwargs.items()]
    return ", ".join(parts)


def _dim(value: Any) -> int | str:
    """A size as an int, or a symbolic one as its expression (`s0`, `u0`). A SymInt is never
    turned into an int here: for an unbacked (data-dependent) size `int()` raises
    GuardOnDataDependentSymNode, and for a backed one it asks the shape environment for a guard
    in the middle of torch's capture."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    node = getattr(value, "node", None)
    if node is not None:  # SymInt
        try:
            constant = node.maybe_as_int()
        except Exception:  # noqa: BLE001 - an older SymNode without it
            constant = None
        return constant if isinstance(constant, int) else str(value)
    try:
        return int(value)
    except Exception:  # noqa: BLE001 - whatever it is, its text is what the record keeps
        return str(value)


def tensor_meta(value: Any) -> tuple[list[int | str] | None, str | None, list[int | str] | None]:
    """shape, dtype, stride of a traced (fake) tensor; symbolic sizes as strings."""
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        return None, None, None
    try:
        stride = [_dim(s) for s in value.stride()]
    except Exception:  # noqa: BLE001 - sparse and other layouts have no strides
        stride = None
    return [_dim(s) for s in shape], str(value.dtype).replace("torch.", ""), stride


def snapshot_meta(graph: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Shapes of every node while the fake values are still attached (end_capture deletes them)."""
    out: dict[str, tuple[Any, Any, Any]] = {}
    for node in graph.nodes:
        value = node.meta.get("val", node.meta.get("example_value"))
        if value is not None:
            meta = tensor_meta(value)
            if meta[0] is not None and _DUMMY_SIZE not in meta[0]:
                out[node.name] = meta
    return out


def _input_origin(node: Any, placeholder_origins: dict[str, list[Any]]) -> AutogradNodeRef | None:
    """The autograd node that owns `inputs[i]` / `scalars[i]`, from the origins C++ gave
    begin_capture (cagtool keeps them instead of letting torch stamp them into the graph)."""
    if node.op != "call_function" or len(node.args) != 2 or not isinstance(node.args[1], int):
        return None
    source = node.args[0]
    origins = placeholder_origins.get(getattr(source, "name", ""), []) if getattr(source, "op", "") == "placeholder" else []
    index = node.args[1]
    if not 0 <= index < len(origins) or not origins[index]:
        return None
    call, name = origins[index]
    return AutogradNodeRef(node_call=int(call), name=str(name))


def summarize_graph(gm: Any, shapes: dict[str, tuple[Any, Any, Any]] | None = None, placeholder_origins: dict[str, list[Any]] | None = None) -> GraphSummary:
    shapes = shapes or {}
    placeholder_origins = placeholder_origins or {}
    nodes: list[GraphNode] = []
    histogram: Counter[str] = Counter()
    autograd: dict[int, str] = {}
    aot_ids: set[int] = set()
    hooks: list[HookRef] = []
    num_sizes = 0
    for node in gm.graph.nodes:
        target = target_name(node.target)
        origin = _origin(node.meta) or _input_origin(node, placeholder_origins)
        if origin is not None:
            autograd.setdefault(origin.node_call, origin.name)
        aot_id = aot_graph_id(node.name)
        if aot_id is not None:
            aot_ids.add(aot_id)
        hook_type = node.kwargs.get("hook_type") if node.op == "call_function" else None
        if hook_type is not None:
            hooks.append(HookRef(name=node.name, hook_type=str(hook_type)))
        if node.op == "call_function" and target.endswith("unwrap_maybe_dynamic_int"):
            num_sizes += 1
        if node.op in ("call_function", "call_method", "call_module"):
            histogram[short_op(node.op, target)] += 1
        shape, dtype, stride = shapes.get(node.name, (None, None, None))
        nodes.append(
            GraphNode(
                name=node.name,
                op=node.op,
                target=target,
                args=_render_args(node),
                origin=origin,
                aot_id=aot_id,
                hook_type=str(hook_type) if hook_type is not None else None,
                shape=shape,
                dtype=dtype,
                stride=stride,
            )
        )
    return GraphSummary.from_tallies(nodes, histogram, autograd, aot_ids, hooks, num_sizes)
