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


# A timing check the machine's load decided keeps the verdict its figures gave (`load_decided`):
# the outcome that verdict is, by the check's direction (a speedup's "above" is a pass).
_FIGURES_OUTCOME = {"above": "fail", "below": "pass"}


def gate_json(*args: str, cwd: Path, code: int, load_may_decide: bool = False) -> dict:
    """The gate's JSON, its exit code `code`. `load_may_decide`: a gate of a real recording, whose
    timing checks a busy runner may make INCONCLUSIVE (exit 5) where the machine's load, not the
    code, may have decided them (a side that waited for a CPU half its runnable time or more,
    docs/ci.md): accepted only with the gate's reason in each such check (`load_decided` and a
    load warning), each then read as the outcome its figures gave, so the caller's assertions
    still hold the figures to the expected verdict."""
    proc = cagtool("gate", "--format", "json", *args, cwd=cwd)
    if load_may_decide and proc.returncode == 5 and code in (0, 1):
        data = json.loads(proc.stdout)
        decided = [c for c in data["checks"] if c["outcome"] == "inconclusive"]
        assert decided, proc.stdout
        for check in decided:
            assert "load_decided" in check["data"] and any("waited for a CPU" in w for w in check["warnings"]), proc.stdout
            figures = check["data"]["load_decided"]
            check["outcome"] = {"above": "pass", "below": "fail"}[figures] if check["check"] == "min-speedup" else _FIGURES_OUTCOME[figures]
        return data
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
        (dest / mode / "cpu_wait.json").unlink(missing_ok=True)  # the machine's load while the real steps ran
    return dest


def one_line_error(proc: subprocess.CompletedProcess, code: int, said: str) -> None:
    """The command refused its input: exit `code`, one line on stderr that says `said`, no traceback."""
    assert proc.returncode == code and said in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
