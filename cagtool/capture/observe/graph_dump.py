"""Turns a compiled-autograd GraphModule into the record's structured form (GraphNode list,
op histogram, autograd nodes covered, inlined AOT graphs, hooks), and a graph module into the
readable code the record keeps of it (`readable_code`)."""

from __future__ import annotations

import functools
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
    # (hook_type, i) of each hook node, reading `hooks[i]` of the graph's call (live captures only)
    hook_slots: tuple[tuple[str, int], ...] = ()

    @classmethod
    def from_tallies(
        cls, nodes: list[GraphNode], histogram: Counter[str], autograd: dict[int, str], aot_ids: set[int], hooks: list[HookRef], num_sizes: int,
        params: dict[int, str] | None = None, hook_slots: list[tuple[str, int]] | None = None,
    ) -> "GraphSummary":
        """The one ordering of a graph's tallies, whether they came from a live GraphModule or a log.
        `params`: NodeCall -> the parameter its AccumulateGrad accumulates into (live captures only)."""
        params = params or {}
        return cls(
            nodes=nodes,
            op_histogram=dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
            autograd_nodes=[AutogradNodeRef(node_call=k, name=v, param=params.get(k)) for k, v in sorted(autograd.items())],
            aot_ids=sorted(aot_ids),
            hooks=hooks,
            num_sizes=num_sizes,
            hook_slots=tuple(hook_slots or ()),
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


def _render_arg(arg: Any, mark: str = "%") -> str:
    """An argument as text, another node written by its name after `mark`."""
    if isinstance(arg, _FxNode.get()):
        return f"{mark}{arg.name}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(_render_arg(a, mark) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner}{',' if len(arg) == 1 else ''})"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_render_arg(v, mark)}" for k, v in arg.items()) + "}"
    return repr(arg)


class _FxNode:
    """torch.fx.Node, imported at the first graph: a graph's arguments are mostly its nodes,
    written without a call each (`_render_args`)."""

    type: Any = None

    @classmethod
    def get(cls) -> Any:
        if cls.type is None:
            import torch.fx

            cls.type = torch.fx.Node
        return cls.type


def _render_args(node: Any, mark: str = "%") -> str:
    node_type = _FxNode.get()
    parts = [f"{mark}{a.name}" if type(a) is node_type else _render_arg(a, mark) for a in node.args]
    kwargs = node.kwargs
    if kwargs:
        parts += [f"{k}={_render_arg(v, mark)}" for k, v in kwargs.items()]
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
        return constant if isinstance(constant, int) else _symbolic_text(value)
    try:
        return int(value)
    except Exception:  # noqa: BLE001 - whatever it is, its text is what the record keeps
        return str(value)


def _symbolic_text(value: Any) -> str:
    """str of a SymInt (its expression as sympy prints it), printed once per expression: the CA
    graph's sizes are a handful of symbols each repeated on hundreds of nodes, and sympy's printer
    costs more than the rest of a node's line."""
    try:
        return _expr_text(value.node.expr)
    except Exception:  # noqa: BLE001 - an unhashable or odd expression: printed as torch prints it
        return str(value)


@functools.lru_cache(maxsize=512)
def _expr_text(expr: Any) -> str:
    return f"{expr}"


def tensor_meta(value: Any) -> tuple[list[int | str] | None, str | None, list[int | str] | None]:
    """shape, dtype, stride of a traced (fake) tensor; symbolic sizes as strings."""
    shape = getattr(value, "shape", None)
    if shape is None or not hasattr(value, "dtype"):
        return None, None, None
    try:
        stride = _dims(value.stride())
    except Exception:  # noqa: BLE001 - sparse and other layouts have no strides
        stride = None
    return _dims(shape), str(value.dtype).replace("torch.", ""), stride


_INTS = frozenset((int,))


def _dims(sizes: Any) -> list[int | str]:
    """`_dim` of each size; a list of plain ints as it is (the common case, checked in one call)."""
    dims = list(sizes)
    return dims if _INTS.issuperset(map(type, dims)) else [_dim(s) for s in dims]


def snapshot_meta(graph: Any, symbolic: list[Any] | None = None) -> dict[str, tuple[Any, Any, Any]]:
    """Shapes of every node while the fake values are still attached (end_capture deletes them).
    `symbolic`, where given, gets the first value with a symbolic size (symbol_values reads its
    shape environment), found in the same walk."""
    out: dict[str, tuple[Any, Any, Any]] = {}
    for node in graph.nodes:
        value = node.meta.get("val", node.meta.get("example_value"))
        if value is not None:
            meta = tensor_meta(value)
            if meta[0] is not None and _DUMMY_SIZE not in meta[0]:
                out[node.name] = meta
                if symbolic is not None and not symbolic and not _INTS.issuperset(map(type, meta[0])):
                    symbolic.append(value)
    return out


def symbol_values(value: Any) -> dict[str, int]:
    """Each size symbol's value in this capture (`s35` -> 64), from the shape environment of a fake
    value with a symbolic size (snapshot_meta finds one) while it is attached (end_capture deletes
    them). Each capture numbers its symbols afresh and duck-sizes equal sizes into one symbol, so two
    graphs' shapes are compared by these values, not by their symbols' names (report/graphs/diff.py).
    A dict read: no guard is asked for (`backed_var_to_val`, the table torch keeps of each backed
    symbol's value)."""
    for size in value.shape:
        shape_env = getattr(getattr(size, "node", None), "shape_env", None)
        if shape_env is None:
            continue
        table = getattr(shape_env, "backed_var_to_val", None)
        if not isinstance(table, dict):
            return {}
        out: dict[str, int] = {}
        for symbol, number in table.items():
            try:
                out[str(symbol)] = int(number)
            except (TypeError, ValueError):  # not a plain integer: left out, its dims compare by name
                continue
        return out
    return {}


def _placeholder_item(node: Any, placeholder: str) -> int | None:
    """i of a node `getitem(<placeholder>, i)` (how the CA graph reads `inputs[i]`, `scalars[i]`)."""
    if node.op != "call_function":
        return None
    args = node.args
    if len(args) != 2 or not isinstance(args[1], int):
        return None
    source = args[0]
    if getattr(source, "op", "") != "placeholder" or getattr(source, "name", "") != placeholder:
        return None
    return args[1]


def _input_origin(node: Any, placeholder_origins: dict[str, list[Any]], stamped: dict[int, str]) -> AutogradNodeRef | None:
    """The autograd node that owns `inputs[i]` / `scalars[i]`, from the origins C++ gave
    begin_capture (cagtool keeps them instead of letting torch stamp them into the graph).

    Only the NodeCall of an origin is used: C++ pairs the node's index in the order the graph runs
    (the NodeCall torch stamps) with the name of the node whose own lookup id has that number, a
    different node whenever an earlier node's edges were looked up first (docs/torch-internals.md,
    "Input origins: the NodeCall is right, the name is not"). The name is the one torch stamped on
    that NodeCall's own nodes; without one the input has no origin."""
    for placeholder, origins in placeholder_origins.items():
        index = _placeholder_item(node, placeholder)
        if index is None:
            continue
        if not 0 <= index < len(origins) or not origins[index]:
            return None
        call = int(origins[index][0])
        return AutogradNodeRef(node_call=call, name=stamped[call]) if call in stamped else None
    return None


def _accumulated_param(node: Any, origin: AutogradNodeRef | None, input_params: dict[int, str]) -> str | None:
    """The parameter an `AccumulateGrad` node accumulates into, where the graph says so for certain:
    torch's `accumulate_grad` emits `call_accumulate_grad(variable, ...)` with the variable read
    from `inputs[i]` (`getitem(inputs, i)`), stamped with its AccumulateGrad's NodeCall; `inputs[i]`
    was that parameter itself when the capture began (`input_params`, by identity)."""
    from torch._dynamo.compiled_autograd import call_accumulate_grad

    if node.target is not call_accumulate_grad or origin is None or not origin.name.endswith("AccumulateGrad") or not node.args:
        return None
    index = _placeholder_item(node.args[0], "inputs") if hasattr(node.args[0], "op") else None
    return input_params.get(index) if index is not None else None


def summarize_graph(
    gm: Any, shapes: dict[str, tuple[Any, Any, Any]] | None = None, placeholder_origins: dict[str, list[Any]] | None = None,
    input_params: dict[int, str] | None = None,
) -> GraphSummary:
    """`input_params`: i -> the name of the parameter that was `inputs[i]` when the capture began."""
    shapes = shapes or {}
    placeholder_origins = placeholder_origins or {}
    input_params = input_params or {}
    nodes: list[GraphNode] = []
    histogram: Counter[str] = Counter()
    autograd: dict[int, str] = {}
    params: dict[int, str] = {}
    aot_ids: set[int] = set()
    hooks: list[HookRef] = []
    hook_slots: list[tuple[str, int]] = []
    num_sizes = 0
    graph_nodes = list(gm.graph.nodes)
    # The stamps torch makes as each autograd node runs name the NodeCalls, read before the nodes
    # that read the graph's inputs (those come first). A stamp on an input read itself comes from
    # begin_capture's origins, had they reached torch: its name is not that NodeCall's (_input_origin).
    origins = [_origin(node.meta) for node in graph_nodes]
    reads_input = [_placeholder_item(node, "inputs") is not None or _placeholder_item(node, "scalars") is not None for node in graph_nodes]
    for origin, read in zip(origins, reads_input):
        if origin is not None and not read:
            autograd.setdefault(origin.node_call, origin.name)
    stamped = dict(autograd)
    for node, stamp, read in zip(graph_nodes, origins, reads_input):
        target = target_name(node.target)
        origin = stamp
        if read:
            origin = _input_origin(node, placeholder_origins, stamped)
            if origin is None and stamp is not None and stamp.node_call in stamped:
                origin = AutogradNodeRef(node_call=stamp.node_call, name=stamped[stamp.node_call])
        param = _accumulated_param(node, stamp, input_params) if input_params else None
        if param is not None and stamp is not None:
            params[stamp.node_call] = param
        aot_id = aot_graph_id(node.name)
        if aot_id is not None:
            aot_ids.add(aot_id)
        hook_type = node.kwargs.get("hook_type") if node.op == "call_function" else None
        if hook_type is not None:
            hooks.append(HookRef(name=node.name, hook_type=str(hook_type)))
            slot = _placeholder_item(node.args[0], "hooks") if node.args and hasattr(node.args[0], "op") else None
            if slot is not None:
                hook_slots.append((str(hook_type), slot))
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
    return GraphSummary.from_tallies(nodes, histogram, autograd, aot_ids, hooks, num_sizes, params, hook_slots)


# -- the graph's readable code ----------------------------------------------------------------
# torch's `print_readable(include_stride=True, include_device=True)` generates the graph's whole
# Python source again (FX's code generation in verbose mode, each node's stack trace parsed):
# what cagtool's printouts of a graph cost inside the compile (benchmarks/README.md, "Compile time
# under cagtool"). Where torch has generated the code to run the graph (`gm.code`), it is reused;
# where it has not (Dynamo's graph is compiled lazily, at its first call, and AOT's tracer often
# never calls it), the nodes are written one line each here, without FX's code generation. Each
# node's value and source line are added by one pass over the nodes. Measured on the 4-block
# transformer of benchmarks/compile_cpu.py under compiled autograd (aot_eager): the job's first two
# steps 20.81 -> 20.57 G instructions, cagtool's taps 2.38 -> 1.01 s of callgrind's CPU
# (benchmarks/results/compile_cpu/20261130-a8a8e78-aot_eager-ca-instructions.txt).


def value_text(value: Any, seen: dict[Any, str] | None = None) -> str | None:
    """A traced value as the graph's text shows it: `float32[8, 16, 64][1024, 64, 1] cpu` for a
    tensor (symbolic sizes by their expression), `Sym(s0)` for a symbolic size, None otherwise.
    `seen`: the texts made so far, by dtype, shape, stride and device (a graph's tensors repeat
    a few of them)."""
    import torch

    if isinstance(value, torch.Tensor):
        try:
            stride = value.stride()
        except Exception:  # noqa: BLE001 - sparse and other layouts have no strides
            stride = None
        key = (value.dtype, value.shape, stride, value.device)
        try:
            return seen[key] if seen is not None else _value_text(*key)
        except KeyError:
            text = seen[key] = _value_text(*key)  # type: ignore[index]
            return text
        except TypeError:  # a symbolic size has no hash
            return _value_text(*key)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"Sym({value})"
    return None


def _value_text(dtype: Any, shape: Any, stride: Any, device: Any) -> str:
    text = f"{str(dtype)[6:]}{_dims(shape)}{_dims(stride) if stride is not None else ''} {device}"
    return text.replace("'", "") if "'" in text else text


def _source_line(trace: str) -> str:
    """`file:line in function: code` of a stack trace's innermost frame (torch's node stack traces
    are formatted tracebacks: `  File "f", line N, in fn`, the code line, maybe a line of carets)."""
    start = trace.rfind('File "')
    if start < 0:
        return ""
    frame, _, rest = trace[start + 6:].partition("\n")
    file, _, after = frame.partition('", line ')
    line, _, function = after.partition(", in ")
    code = rest.split("\n", 1)[0].strip()
    return f"{file}:{line} in {function}" + (f": {code}" if code else "")


def _generated_code(gm: Any) -> str | None:
    """The code torch generated to run the module, None where it has not: a lazily compiled module
    (Dynamo's) before its first call. Not compiled here: that would number its code
    `<eval_with_key>.N` before torch does, and give a graph the backend never runs code it never
    gets under plain python."""
    from torch.fx._lazy_graph_module import _LazyGraphModule

    if isinstance(gm, _LazyGraphModule) and gm._needs_recompile():
        return None
    code = getattr(gm, "_code", None)
    return code if isinstance(code, str) else None


def _node_line(node: Any, targets: dict[Any, str]) -> str | None:
    """One node as a line of Python, its arguments as `_render_arg` writes them, without the `%`.
    `targets`: the target names made so far."""
    op = node.op
    if op == "placeholder":
        return f"{node.name} = {node.target}" if node.name != node.target else None
    if op == "output":
        return f"return {_render_arg(node.args[0] if node.args else None, '')}"
    if op == "get_attr":
        return f"{node.name} = self.{node.target}"
    args = _render_args(node, "")
    if op == "call_method":
        first, _, rest = args.partition(", ")
        return f"{node.name} = {first}.{node.target}({rest})"
    if op == "call_module":
        return f"{node.name} = self.{node.target}({args})"
    target = node.target
    try:
        name = targets[target]
    except KeyError:
        name = targets[target] = target_name(target)
    except TypeError:  # unhashable
        name = target_name(target)
    return f"{node.name} = {name}({args})"


def readable_code(gm: Any, values: dict[str, str] | None = None, name: str | None = None) -> str:
    """The graph module as Python, headed by a class named like the module as torch's
    `print_readable` heads it, its child graph modules nested below: the code torch generated to
    run it, else a line per node (`_node_line`); each node's value (`value_text`) after its line,
    and above a node whose source line differs from the last one written, that line. `values`: node
    name -> its value's text, where the graph's node meta no longer holds the values (a
    compiled-autograd graph's)."""
    import torch.fx

    code = _generated_code(gm)
    notes: dict[str, tuple[str, str | None]] = {}
    body: list[str] = []
    seen: dict[Any, str] = {}
    targets: dict[Any, str] = {}
    last_trace: Any = None
    shown = ""  # the source line written last
    inputs: list[str] = []
    for node in gm.graph.nodes:
        meta = node.meta
        source = ""
        if node.op in ("placeholder", "output"):  # an input's trace is its first use's (print_readable leaves them out too)
            if node.op == "placeholder":
                inputs.append(str(node.target))
        else:
            trace = meta.get("stack_trace")
            if trace is not last_trace and trace != last_trace:  # the nodes of one line share their trace
                last_trace = trace
                line = _source_line(trace) if isinstance(trace, str) and trace else ""
                if line and line != shown:
                    source = shown = line
        if values is not None:
            value = values.get(node.name)
        else:
            example = meta.get("example_value", meta.get("val"))
            value = value_text(example, seen) if example is not None else None
        if code is not None:
            if source or value:
                notes[node.name] = (source, value)
            continue
        text = _node_line(node, targets)
        if text is None:
            if value:  # an input of its own name: its value where its line would be
                body.append(f"        # {node.name}: {value}")
            continue
        if source:
            body.append(f"        # {source}")
        body.append(f"        {text}  # {value}" if value else f"        {text}")
    lines: list[str] = [f"class {name or gm._get_name()}(torch.nn.Module):"]
    if code is None:
        lines.append(f"    def forward(self{', ' if inputs else ''}{', '.join(inputs)}):")
        lines += body
    else:
        for line in code.lstrip("\n").rstrip().split("\n"):
            head = line.lstrip()
            note = notes.get(head.split(" = ", 1)[0]) if " = " in head else None
            if note is None:
                lines.append(f"    {line}" if line else "")
                continue
            source, value = note
            if source:
                lines.append(f"    {line[:len(line) - len(head)]}# {source}")
            lines.append(f"    {line}  # {value}" if value else f"    {line}")
    for child_name, child in gm.named_children():
        if isinstance(child, torch.fx.GraphModule):
            lines.append("")
            lines.extend(f"    {line}" if line else "" for line in readable_code(child, None, child_name).split("\n"))
    return "\n".join(lines) + "\n"
