"""The user's line behind a compile or a backward, and the line of a library on the way to it
(`SourceRef.via`): HF Trainer's `trainer.train()` reaches the compiled model through
transformers/trainer.py, which is where the call is made."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from cagtool.capture.observe import source


def _library(tmp_path: Path, monkeypatch, body: str):
    """A package `fakelib` under a folder cagtool takes for site-packages, imported from there."""
    root = tmp_path / "site-packages"
    (root / "fakelib").mkdir(parents=True)
    (root / "fakelib" / "__init__.py").write_text("")
    (root / "fakelib" / "trainer.py").write_text(body)
    prefix = str(root.resolve()) + "/"
    monkeypatch.setattr(source, "_PACKAGE_ROOTS", (*source._PACKAGE_ROOTS, prefix))
    monkeypatch.setattr(source, "_LIBRARY_ROOTS", (*source._LIBRARY_ROOTS, prefix))
    spec = importlib.util.spec_from_file_location("fakelib.trainer", root / "fakelib" / "trainer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_library_between_the_users_line_and_the_call_is_named_as_via(tmp_path, monkeypatch):
    trainer = _library(tmp_path, monkeypatch, (
        "from cagtool.capture.observe import source\n"
        "def compute_loss():\n"
        "    return source.user_caller(how='caller')  # line 3: the library's call\n"
        "def train():\n"
        "    return compute_loss()\n"))
    found = trainer.train()  # the user's line
    assert found is not None and found.file == __file__ and found.code == "found = trainer.train()  # the user's line"
    assert found.via == "fakelib/trainer.py:3" and found.how == "caller"
    assert source.library_file(str(tmp_path / "site-packages" / "fakelib" / "trainer.py")) == "fakelib/trainer.py"


def test_a_call_the_users_line_makes_itself_has_no_via():
    here = source.user_caller(sys._getframe(), how="caller")
    assert here is not None and here.via == "" and here.file == __file__
    # torch's own files and the standard library's are not a library that made the call
    import torch

    assert source.library_file(torch.__file__) is None and source.library_file(importlib.util.__file__) is None
