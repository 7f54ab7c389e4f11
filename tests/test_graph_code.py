"""The graphs' code cagtool writes (a compile's Dynamo graph, a compiled-autograd graph's code
file): every node of the graph torch compiled, each tensor's dtype, shape, stride and device, the
user's source line, and no work torch would not have done (a lazily compiled graph module stays
uncompiled). Real torch: graphs handed to a backend by a real compile."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from torch._dynamo import compiled_autograd as ca

from cagtool.capture.observe import graph_dump

_ASSIGNED = re.compile(r"^\s+([A-Za-z_]\w*)(?:\s*:\s*\"[^\"]*\")? = ", re.MULTILINE)


def _compile(fn: Any, *args: Any, dynamic: bool = False) -> tuple[str, str, bool]:
    """(cagtool's text, torch's print_readable, whether the module still awaited its code) of the
    graph Dynamo hands its backend for `fn(*args)`, read as cagtool's tap reads it: before the backend."""
    seen: dict[str, Any] = {}

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        seen["ours"] = graph_dump.readable_code(gm)
        seen["lazy"] = type(gm)._needs_recompile() if hasattr(type(gm), "_needs_recompile") else None
        seen["torch"] = gm.print_readable(print_output=False, include_stride=True, include_device=True)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, dynamic=dynamic)(*args)
    return seen["ours"], seen["torch"], seen["lazy"]


def _layer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.linear(x, w)
    return h.relu().sum(dim=1, keepdim=True) * 2


def test_the_dynamo_graph_names_every_node_with_its_tensor_and_source_line():
    ours, theirs, lazy = _compile(_layer, torch.randn(3, 4), torch.randn(5, 4))
    assert lazy is True  # read without compiling the module: torch compiles it at its first call, as without cagtool
    assert ours.startswith("class GraphModule(torch.nn.Module):\n    def forward(self, L_x_, L_w_):\n")
    # the same nodes as torch's own printout of the graph
    assert set(_ASSIGNED.findall(ours)) == set(_ASSIGNED.findall(theirs)) and "h" in _ASSIGNED.findall(ours)
    assert re.search(r"\n        h = torch\._C\._nn\.linear\(l_x_, l_w_\)  # float32\[3, 5\]\[5, 1\] cpu\n", ours), ours
    assert "  # float32[3, 1][1, 1] cpu\n" in ours  # the sum, kept dimension
    assert re.search(r"# \S+test_graph_code\.py:\d+ in _layer: h = torch\.nn\.functional\.linear\(x, w\)\n", ours), ours
    assert ours.count("in _layer: return h.relu()") == 1  # a line's nodes under one comment
    assert "return (mul,)" in ours


def test_symbolic_sizes_read_as_their_expressions():
    ours, _, _ = _compile(_layer, torch.randn(3, 4), torch.randn(5, 4), dynamic=True)
    assert re.search(r"float32\[s\d+, s\d+\]\[s\d+, 1\] cpu", ours), ours
    assert re.search(r"\n        # s(\d+): Sym\(s\1\)\n", ours), ours  # a size the graph takes as an input


def test_symbolic_sizes_read_as_torch_prints_them_every_time():
    seen: list[tuple[Any, Any]] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        for node in gm.graph.nodes:
            value = node.meta.get("example_value")
            if isinstance(value, torch.Tensor):
                expected = [s if isinstance(s, int) else (s.node.maybe_as_int() if s.node.maybe_as_int() is not None else str(s)) for s in value.shape]
                seen.extend((graph_dump.tensor_meta(value)[0], expected) for _ in range(2))  # printed, then read again
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda x: x.reshape(-1) * 2 + x.sum(), backend=backend, dynamic=True)(torch.randn(3, 4))
    assert seen and all(ours == theirs for ours, theirs in seen), seen
    assert any(isinstance(d, str) and "*" in d for ours, _ in seen for d in ours), seen  # s0*s1, not only single symbols


def test_a_compiled_autograd_graph_is_the_code_torch_generated_with_its_nodes_origins():
    seen: dict[str, Any] = {}

    def compiler(gm: torch.fx.GraphModule) -> Any:
        seen["gm"] = gm
        return torch.compile(gm, backend="eager")

    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    with ca._enable(compiler, dynamic=False):
        model(torch.randn(2, 4)).sum().backward()
    gm = seen["gm"]
    text = graph_dump.readable_code(gm, {})
    assert text.startswith(f"class {type(gm).__name__}(torch.nn.Module):\n") and type(gm).__name__.startswith("CompiledAutograd")
    code_lines = [line for line in text.splitlines()[1:] if not line.strip().startswith("# ")]
    assert code_lines == ["    " + line if line else "" for line in gm.code.lstrip("\n").rstrip().splitlines()]
    assert re.search(r"# \S+ in set_node_origin: torch::autograd::AccumulateGrad \(NodeCall \d+\)\n", text), text


def test_a_graph_with_a_child_graph_module_prints_it_nested():
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda y: y.sin(), lambda y: y.cos(), (x,))

    ours, theirs, _ = _compile(f, torch.randn(3))
    children = re.findall(r"^    class (\w+)\(torch\.nn\.Module\):", ours, re.MULTILINE)
    assert children and children == re.findall(r"^    class (\w+)\(torch\.nn\.Module\):", theirs, re.MULTILINE)
    assert "sin = " in ours and "cos = " in ours


@pytest.mark.parametrize("value, text", [
    (torch.zeros(2, 3, dtype=torch.float16).t(), "float16[3, 2][1, 3] cpu"),
    (torch.zeros((), dtype=torch.int64), "int64[][] cpu"),
    (torch.empty(2, 2, dtype=torch.bool, device="meta"), "bool[2, 2][2, 1] meta"),
    (3, None),
])
def test_value_text(value, text):
    assert graph_dump.value_text(value) == text
    assert graph_dump.value_text(value, {}) == text
