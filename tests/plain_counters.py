"""torch's own counters of a job run by plain python, for tests that compare them with a record's:
the script as written, or inside compiled autograd by hand (benchmarks/ca_by_hand.py's wrapper),
and the counts those tests compare; a plain run beside a `cagtool run` of the same script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WRAPPER = """
import json, runpy, sys
under_ca, sys.argv = sys.argv[1] == "1", sys.argv[2:]
import torch
from torch._dynamo import compiled_autograd
if under_ca:
    with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager"), dynamic=False):
        runpy.run_path(sys.argv[0], run_name="__main__")
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
from torch._dynamo.utils import counters
print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
"""


def key_counts(counters: dict) -> dict:
    return {
        "graph_breaks": sorted((reason[:300], n) for reason, n in counters.get("graph_break", {}).items()),
        "unique_graphs": counters.get("stats", {}).get("unique_graphs", 0),
        "calls_captured": counters.get("stats", {}).get("calls_captured", 0),
        "frames": counters.get("frames", {}),
        "recompiles": counters.get("recompiles", {}),
        "ca_captures": counters.get("compiled_autograd", {}).get("captures", 0),
    }


def plain_and_recorded(script: str, args: tuple[str, ...], out: Path, modes: str = "aot", timeout: int = 600) -> tuple[str, Any, Any]:
    """`python SCRIPT ARGS` and `cagtool run --modes MODES --backend eager SCRIPT ARGS` side by side:
    the plain run's stdout, the cagtool run's completed process, and its record (loaded)."""
    import subprocess
    import sys

    from cagtool.record.loader import load_run

    root = str(Path(__file__).resolve().parent.parent)
    plain = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
    try:
        run = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", modes, "--backend", "eager", "--no-report", "-o", str(out), script, *args],
                             capture_output=True, text=True, cwd=root, timeout=timeout)
        stdout, stderr = plain.communicate(timeout=timeout)
    finally:
        plain.kill()
        plain.wait()
    assert plain.returncode == 0, stderr[-2000:]
    assert run.returncode == 0, run.stderr[-3000:]
    return stdout, run, load_run(out)
