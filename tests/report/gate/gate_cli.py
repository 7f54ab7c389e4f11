"""The gate tests' way of running the CLI and reading what it says (test_gate_cli.py, test_gate_noise.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import cagtool_in_process


def cagtool(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """In-process (cagtool_in_process), with GITHUB_ACTIONS and GITHUB_STEP_SUMMARY unset unless
    `env` sets them."""
    return cagtool_in_process(*args, cwd=cwd, env=env)


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
