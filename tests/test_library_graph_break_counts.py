"""torch's own counters of a job with a library-style nested graph break are the same under
`cagtool run` as under plain python: aot against the script as written, ca against the script run
inside compiled autograd by hand (benchmarks/ca_by_hand.py's wrapper). cagtool reads Dynamo without
a handler on torch's structured logger (docs/torch-internals.md). Two jobs: the shape in a small
script, and transformers' own Trainer (run where transformers is installed beside the pinned torch)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from plain_counters import WRAPPER, key_counts

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "scripts"
NO_TRANSFORMERS = importlib.util.find_spec("transformers") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        "library_graph_break.py",
        pytest.param(
            "hf_trainer_job.py",
            marks=pytest.mark.skipif(NO_TRANSFORMERS, reason="transformers is not installed (pip install transformers beside the pinned torch)"),
        ),
    ],
)
def test_counters_equal_plain_python_in_aot_and_ca(script, tmp_path):
    script = str(SCRIPTS / script)
    plain = {
        under_ca: subprocess.Popen([sys.executable, "-c", WRAPPER, under_ca, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        for under_ca in ("0", "1")
    }
    try:
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", "aot,ca", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script],
                             capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        counts = {}
        for under_ca, proc in plain.items():
            stdout, stderr = proc.communicate(timeout=600)
            assert proc.returncode == 0, stderr[-2000:]
            counts[under_ca] = key_counts(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in plain.values():
            proc.kill()
            proc.wait()
    record = load_run(tmp_path / "r")
    aot, ca = (key_counts(record.mode(m).manifest.torch_counters) for m in ("aot", "ca"))
    assert counts["0"]["graph_breaks"] and sum(n for _, n in counts["0"]["graph_breaks"]) >= 2  # the shape this pins: nested breaks
    assert aot == counts["0"]
    assert ca == counts["1"]
