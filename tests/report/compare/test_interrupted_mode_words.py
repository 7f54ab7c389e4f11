"""A mode stopped by Ctrl-C is said as interrupted wherever its end is worded, never as failed: the
speedup notes of `cagtool run`'s end output, `compare` and the HTML report ("ca: it was interrupted
before a steady step"), and the headline ("no recompiles in ca before it was interrupted"); and
`cagtool runs` lists every mode run.json asked for, the one the run never started as `not run`.

One real run, recorded once for the module: `--modes eager,ca,aot`, the script sending itself
SIGINT (as a terminal's Ctrl-C does) at its second step under compiled autograd: eager finishes,
ca is interrupted before a steady step, aot never starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import cagtool_cmd, cagtool_in_process, cli_in_process, recorded_once

_SCRIPT = """\
import os
import signal

import torch
from torch._dynamo import compiled_autograd

torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
for step in range(8):
    if step == 1 and compiled_autograd.compiled_autograd_enabled:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the ca mode, after its first step
    model(torch.randn(2, 4)).sum().backward()
"""

_INTERRUPTED = "ca: it was interrupted before a steady step"


def _record(slot: Path) -> dict:
    (slot / "train.py").write_text(_SCRIPT)
    proc = subprocess.run(
        cagtool_cmd("run", "--modes", "eager,ca,aot", "--backend", "eager", "-o", "r", "train.py"),
        capture_output=True, text=True, cwd=slot, env={**os.environ, "CI": "true"}, timeout=600,
        # A runner that starts the suite without job control leaves SIGINT ignored in its children.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    return {"returncode": proc.returncode, "stderr": proc.stderr}


@pytest.fixture(scope="module")
def interrupted_in_ca(tmp_path_factory) -> tuple[Path, dict]:
    where, result = recorded_once(tmp_path_factory, "interrupted_in_ca", _record)
    assert result["returncode"] == 130, result["stderr"]
    return where / "r", result


def _failed_words(text: str) -> list[str]:
    """The phrases about ca that call it failed or dead."""
    bad = re.compile(r"fail|died|dead|killed|crash", re.IGNORECASE)
    return [p for p in re.split(r"[;\n]|\(\+", text) if re.search(r"\bca\b", p) and bad.search(p)]


@pytest.mark.slow
def test_a_mode_interrupted_before_a_steady_step_reads_as_interrupted(interrupted_in_ca):
    run_dir, result = interrupted_in_ca
    # `cagtool run`'s own end output (stderr: stdout is the script's).
    assert _INTERRUPTED in result["stderr"] and "no recompiles in ca before it was interrupted" in result["stderr"], result["stderr"]
    assert _failed_words(result["stderr"]) == [], result["stderr"]

    compare = cagtool_in_process("compare", run_dir)
    assert compare.returncode == 0, compare.stderr
    headline = compare.stdout.splitlines()[0]
    assert "no recompiles in ca before it was interrupted" in headline and f"not timed ({_INTERRUPTED})" in headline, headline
    assert _INTERRUPTED in compare.stdout and "aot: not run: the run was interrupted" in compare.stdout, compare.stdout
    assert _failed_words(compare.stdout) == [], compare.stdout

    summary = cagtool_in_process("summary", run_dir)
    assert summary.returncode == 0 and _failed_words(summary.stdout) == [], summary.stdout

    # The HTML report the run wrote: the same notes and headline.
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert _INTERRUPTED in html and "no recompiles in ca before it was interrupted" in html
    assert "failed before a steady step" not in html and "before it failed" not in html
    # the header's modes row: the mode the stopped run never started is not run, not a missing record
    assert "not run (the run was interrupted): aot" in html and "no record: aot" not in html


@pytest.mark.slow
def test_runs_lists_the_mode_the_run_never_started(interrupted_in_ca):
    run_dir, _ = interrupted_in_ca
    code, out, err = cli_in_process("runs", str(run_dir.parent))
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith(f"{run_dir} ")]  # one line per run
    assert re.search(r"\beager:finished, ca:interrupted, aot:not run +130$", line), out
