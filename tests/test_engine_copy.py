"""The copy of torch's `_engine_run_backward` body that capture/steps/hooks.py runs in its place is
pinned to the installed torch's source (capture/steps/engine_copy.py), here and by `cagtool doctor`."""

from __future__ import annotations

import ast
import inspect

import torch

from cagtool.capture.steps import engine_copy, hooks
from cagtool.doctor import FAIL, OK, check_engine_copy


def test_installed_torch_has_the_body_cagtool_copied():
    result = engine_copy.compare_with_installed()
    assert result.problem == "" and result.diff == ""
    assert result.same, result.diff
    # read from the file, not the live function (cagtool replaces torch.autograd._engine_run_backward)
    assert result.source_file == inspect.getsourcefile(torch.autograd.graph)


def test_comparison_is_of_code_not_of_comments_or_layout():
    """torch's own text has comments, annotations and a multi-line call; the pinned copy has none
    of them and still compares equal. A changed statement does not."""
    real = inspect.getsource(torch.autograd.graph._engine_run_backward)
    assert "#" in real and "->" in real
    assert engine_copy.normalized(real) == engine_copy.normalized(engine_copy.COPIED_FROM_TORCH_2_13)
    changed = engine_copy.COPIED_FROM_TORCH_2_13.replace('torch._C._remove_obj_from_tls("context")', 'torch._C._stash_obj_in_tls("context", None)')
    assert engine_copy.normalized(changed) != engine_copy.normalized(engine_copy.COPIED_FROM_TORCH_2_13)


def test_doctor_fails_when_the_copy_and_torch_differ(monkeypatch):
    assert check_engine_copy().status == OK
    monkeypatch.setattr(engine_copy, "COPIED_FROM_TORCH_2_13", engine_copy.COPIED_FROM_TORCH_2_13.replace("<= logging.DEBUG", "< logging.DEBUG"))
    check = check_engine_copy()
    assert check.status == FAIL and "differs from the body cagtool runs" in check.detail
    assert "-    attach_logging_hooks = log.getEffectiveLevel() < logging.DEBUG" in check.facts["diff"]


def _called_names(function: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            target = node.func
            names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def test_steps_replacement_makes_every_call_the_copied_body_makes():
    """The pin is of what hooks.py copied: its replacement still calls what torch's body calls."""
    tree = ast.parse(inspect.getsource(hooks))
    (replacement,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == engine_copy.FUNCTION]
    (copied,) = [n for n in ast.walk(ast.parse(engine_copy.COPIED_FROM_TORCH_2_13)) if isinstance(n, ast.FunctionDef)]
    expected = _called_names(copied)
    assert expected <= _called_names(replacement), expected - _called_names(replacement)
