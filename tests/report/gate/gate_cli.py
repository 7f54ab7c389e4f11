"""The gate tests' way of running the CLI and reading what it says (test_gate_cli.py, test_gate_noise.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_GITHUB_VARS = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")


def cagtool(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in _GITHUB_VARS}
    return subprocess.run(
        [sys.executable, "-m", "cagtool", *[str(a) for a in args]], capture_output=True, text=True, timeout=120, cwd=str(cwd), env={**base, **(env or {})}
    )


def gate_json(*args: str, cwd: Path, code: int) -> dict:
    proc = cagtool("gate", "--format", "json", *args, cwd=cwd)
    assert proc.returncode == code, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def outcomes(data: dict) -> dict[str, str]:
    return {c["check"]: c["outcome"] for c in data["checks"]}


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
