"""--verify compares a fix's numbers with the baseline re-run's only where the job reproduces its own:
the baseline re-run, without any fix, against the recorded run of the same job, seed and options.
pytorch/examples' word language model (Inductor, lr 20) parted from itself at its sixth step, and
its eval-uncompiled fix read HARMFUL for "losses or final norms changed" that no fix had caused."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ROOT, cagtool_cmd

from cagtool.record.loader import load_run
from cagtool.verify.verification import numerics_unreproduced

pytestmark = pytest.mark.slow


def _recorded(tmp_path, name: str, script: str, *args: str) -> object:
    out = tmp_path / name
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(out), script, *args),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return load_run(out)


def test_a_job_that_does_not_reproduce_its_losses_is_not_judged_on_them_and_one_that_does_is(tmp_path):
    drawn = str(ROOT / "tests" / "scripts" / "saves_at_end.py")  # seeded from os.urandom: other numbers every run
    words = numerics_unreproduced(_recorded(tmp_path, "a", drawn), _recorded(tmp_path, "b", drawn), "ca")
    assert words is not None and words.startswith("the baseline re-run, without any fix, already differs from the recorded run "
                                                  "in its loss at step 0"), words
    same = str(ROOT / "sample_scripts" / "mlp_steps.py")  # seeded by cagtool alike in every run
    assert numerics_unreproduced(_recorded(tmp_path, "c", same, "--steps", "8"), _recorded(tmp_path, "d", same, "--steps", "8"), "ca") is None
