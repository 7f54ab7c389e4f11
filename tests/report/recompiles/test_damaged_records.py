"""Honest output from a damaged record: a record whose events contradict torch's own counters
never leads with "no recompiles", and a compile artifact whose file is gone (guard detail) is left
out with a note, not the end of four commands.

Record (conftest.record_run, copied before it is damaged):
    cagtool run --modes ca --backend eager -o DIR sample_scripts/op_loop.py
(3 CA recompiles: torch counts 4 captures.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import OP_LOOP_INSPECT_RECOMPILES as INSPECT_RECOMPILES
from conftest import cli_in_process

pytestmark = pytest.mark.slow

EVENTS_KEPT = 13  # op_loop's first CA graph is among its first 13 lines; its later graphs are cut off


def _cagtool(*args: str) -> tuple[int, str, str]:
    return cli_in_process(*args, env={"CI": "true", "COLUMNS": "100"}, unset=("FORCE_COLOR",))


def _cut_copy(record_run, tmp_path: Path) -> Path:
    """The record with its events cut mid-line after line EVENTS_KEPT (a truncated copy)."""
    run = tmp_path / "op_tr"
    shutil.copytree(record_run("op_loop.py").path, run)
    events = run / "ca" / "events.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    kept = b"".join(lines[:EVENTS_KEPT])
    events.write_bytes(kept + lines[EVENTS_KEPT][: len(lines[EVENTS_KEPT]) // 2])
    return run


def test_a_damaged_record_never_leads_with_no_recompiles(record_run, tmp_path):
    run = _cut_copy(record_run, tmp_path)
    code, out, _ = _cagtool("summary", str(run))
    assert code == 0
    headline = " ".join(out.split("what to do:")[0].split())  # the console folds it
    assert headline.startswith("record damaged: ") and "torch counted 4 captures" in headline, out
    assert "recompiles not known" in headline and "no recompiles" not in out.lower()
    code, out, _ = _cagtool("summary", str(run), "--format", "json")
    assert code == 0 and json.loads(out)["headline"]["text"].startswith("record damaged: ")
    for args in ((), ("--explain",)):
        code, out, _ = _cagtool("recompiles", str(run), *args)
        out = " ".join(out.split())  # lines folded at the console's width
        assert code == 0
        assert "record damaged (" in out and "recompiles not known" in out, out
        assert "no recompiles" not in out.lower(), out
        code, out, _ = _cagtool("recompiles", str(run), *args, "--format", "json")
        mode = json.loads(out)["modes"]["ca"]
        assert code == 0 and mode["counts"]["recompiles"] is None
        assert any("torch counted 4 captures" in p for p in mode["damaged"])


def test_a_sound_record_is_not_called_damaged(record_run):
    code, out, _ = _cagtool("recompiles", str(record_run("op_loop.py").path), "--format", "json")
    mode = json.loads(out)["modes"]["ca"]
    assert code == 0 and mode["damaged"] == [] and mode["counts"]["recompiles"] == 3 + INSPECT_RECOMPILES  # torch 2.14's own frames apart


def test_a_missing_guard_file_is_left_out_with_a_note(record_run, tmp_path):
    run = tmp_path / "mlp"
    shutil.copytree(record_run("mlp_steps.py", modes="eager,ca").path, run)
    gone = run / "ca" / "compiles" / "0_0" / "dynamo_cpp_guards_str.txt"
    gone.unlink()
    for command in ("summary", "compare", "report"):
        code, out, err = _cagtool(command, str(run))
        assert code == 0, (command, out, err)
    code, out, err = _cagtool("recompiles", str(run))
    assert code == 0, err
    assert f"note: compile artifact {gone} is missing; its guard detail is left out" in " ".join(out.split())


def test_a_guard_file_planted_as_a_link_is_still_refused(record_run, tmp_path):
    run = tmp_path / "mlp"
    shutil.copytree(record_run("mlp_steps.py", modes="eager,ca").path, run)
    guards = run / "ca" / "compiles" / "0_0" / "dynamo_cpp_guards_str.txt"
    outside = tmp_path / "elsewhere.txt"
    outside.write_text(guards.read_text())
    guards.unlink()
    guards.symlink_to(outside)
    code, _, err = _cagtool("recompiles", str(run))
    assert code == 3 and "symbolic link" in err
