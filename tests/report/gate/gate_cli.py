"""The gate tests' way of running the CLI and reading what it says (test_gate_cli.py, test_gate_noise.py)."""

from __future__ import annotations

import json
import random
import shutil
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


def machine_free_copy(run: Path, dest: Path, modes: tuple[str, ...] = ("ca",)) -> Path:
    """The run with its steady steps' times in `modes` replaced by a fixed series (seeded,
    independent draws within +-10% of 1 ms), and no CPU times: what the gate is given does not
    depend on how busy the machine was."""
    shutil.copytree(run, dest)
    draw = random.Random(0)
    for mode in modes:
        events_file = dest / mode / "events.jsonl"
        events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
        for event in events:
            if event["kind"] == "step" and event.get("wall_s") is not None and not event.get("compiles") and not event.get("ca_captures"):
                event["wall_s"] = draw.uniform(0.9e-3, 1.1e-3)
            if event["kind"] == "step":
                # Judged on the wall times set here: without CPU times, as a record written before
                # steps kept them.
                event.pop("cpu_s", None)
                event.pop("thread_cpu_s", None)
        events_file.write_text("".join(json.dumps(e) + "\n" for e in events))
        (dest / mode / "columns.json").unlink(missing_ok=True)  # it holds the times replaced here
    return dest
