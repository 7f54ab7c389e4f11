"""`mark_dynamic` under compiled autograd is an error, not a fix (docs/torch-internals.md): cagtool
never offers it for a changed size (it offers maybe_mark_dynamic), and a job that used it says what
the error means, and that nothing ran after a first step, not that later steps reused graphs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT, cli_in_process

pytestmark = pytest.mark.slow

SCRIPT = "../tests/scripts/mark_dynamic_batch.py"


def test_a_job_that_marked_a_dimension_dynamic_under_ca_is_explained(record_run):
    plain = subprocess.run([sys.executable, str(ROOT / "tests" / "scripts" / "mark_dynamic_batch.py")], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]  # the job itself is fine
    run = record_run(SCRIPT)
    assert run.returncode != 0 and "ConstraintViolationError" in run.stderr
    code, summary, _ = cli_in_process("summary", str(run.path))
    said = " ".join(summary.split())
    assert "what it means: torch._dynamo.mark_dynamic makes any specialization of the marked dimension an error" in said
    assert "torch._dynamo.maybe_mark_dynamic(tensor, dim)" in said
    code, explained, _ = cli_in_process("recompiles", str(run.path), "--explain")
    assert "No recompiles, in 0 steps; the mode failed: nothing ran after a first step" in " ".join(explained.split())
    assert "reused the cached graphs" not in explained
