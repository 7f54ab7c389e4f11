"""A custom autograd.Function that is another class at every call (tests/scripts/grad_reverse.py, a
DANN's gradient reversal layer): compiled autograd keys its cache on the class, so every backward
is captured anew, a miss torch names "new node" on a graph of the same nodes. Read as that, with
the fix that ends it, not as "a number the backward's nodes saved changes"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli_in_process

pytestmark = pytest.mark.slow


def _run(record_run, *args: str) -> Path:
    run = record_run("../tests/scripts/grad_reverse.py", *args)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def _causes(run: Path) -> list[dict]:
    code, out, err = cli_in_process("recompiles", str(run), "--explain", "--format", "json")
    assert code == 0, err
    return json.loads(out)["modes"]["ca"]["explanation"]["causes"]


def _said(cause: dict) -> str:
    return " ".join([cause["title"], *cause["why"], *cause["fix"]])


def test_a_function_compiled_with_the_eager_backend_is_a_new_class_each_call_and_aot_is_the_fix(record_run):
    """torch.compile(model, backend="eager") over a model whose forward calls a custom Function:
    torch's autograd_function_apply builds ApplyTemplate at every call, so each backward misses on
    `ApplyTemplateBackward` and Dynamo's compile of the graph's code fails its guard on that class.
    Both causes say so and give the backend that runs AOTAutograd as the fix; the summary's advice is it."""
    run = _run(record_run)
    causes = _causes(run)
    structure, guard = causes[0], causes[1]
    assert structure["code"] == "graph_structure" and structure["count"] == 7
    said = _said(structure)
    assert structure["title"].startswith("The backward's custom autograd.Function is another class at every call")
    assert "`ApplyTemplateBackward` is the node of the class torch builds at every call" in said
    assert "`___check_type_id(backward_c_function, ...)` for `ApplyTemplateBackward`, failed at !1/2/1" in said
    assert "saved" not in structure["title"] and "keep it the same on every step" not in said
    assert 'backend="aot_eager"' in structure["fix"][0] and "torch.compiler.disable" in structure["fix"][0]
    assert guard["code"] == "dynamo_ca_graph_guard_failure" and "another class of the same name (`ApplyTemplateBackward`)" in guard["title"]
    assert guard["fix"] == structure["fix"] and "keep argument types fixed" not in _said(guard)
    head = cli_in_process("summary", str(run))[1].splitlines()
    assert "a custom autograd.Function was another class at each call (`ApplyTemplateBackward`)" in head[0]
    assert head[1].startswith("what to do: Compile the code that calls the custom autograd.Function with a backend that runs AOTAutograd")


def test_a_function_class_defined_in_the_forward_is_likely_a_new_class_and_defined_once_is_the_fix(record_run):
    """The Function class defined inside the function the forward calls, nothing compiled but the
    CA graphs: no Dynamo guard names the class (each graph's code is new), and the graphs' files read
    alike, so the class is the likeliest difference, said as such, with the class defined once."""
    [cause] = _causes(_run(record_run, "--inner"))
    said = _said(cause)
    assert cause["title"].startswith("The backward's custom autograd.Function is likely another class at every call (7 recompiles)")
    assert "`ReverseBackward` is a custom autograd.Function's node, and the graphs it was captured in hold nothing different" in said
    assert cause["fix"][0].startswith("Define the autograd.Function class once, at module level")
