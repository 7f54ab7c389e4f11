"""Issue 14's table as tests: what cagtool guarantees when the job, the machine or the record
misbehaves (docs/reliability.md lists the guarantees).

Reading side (hostile or damaged records): hand-built run directories, read through the real CLI
in-process (fast: no torch run). Each test names the row of the table it covers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cagtool.record.manifest import ModeManifest, RunMeta, to_dict

# ------------------------------------------------------------------ reading: hand-built records


def cagtool(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    """Run cli.main in-process; returns (exit code, stdout, stderr)."""
    import contextlib
    import io
    import sys

    from cagtool.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_env = dict(os.environ)
    old_cwd = os.getcwd()
    os.environ.update(env or {})
    if "GITHUB_ACTIONS" not in (env or {}):
        os.environ.pop("GITHUB_ACTIONS", None)
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        sys.stdout.flush()
    return code, out.getvalue(), err.getvalue()


def _manifest(mode: str, status: str = "finished", **extra) -> dict:
    manifest = ModeManifest(mode=mode, argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd="/",
                            versions={"torch": "2.13.0"}, backend="eager" if mode == "ca" else "none", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status=status, exit_code=0 if status == "finished" else 1,
                            duration_s=1.0)
    data = to_dict(manifest)
    data.update(extra)
    return data


def _steps(n: int = 8, ms: float = 10.0) -> list[dict]:
    events, t = [], 0.0
    for i in range(1, n + 1):
        t += ms / 1000
        events.append({"kind": "step", "seq": i, "t": t, "step": i, "loss": 1.0 / i})
    return events


def write_run(root: Path, modes: dict[str, dict | None], asked: list[str] | None = None, events: dict[str, list] | None = None,
              meta_extra: dict | None = None) -> Path:
    """A run directory: `modes` maps a mode to its manifest (None: listed in run.json, no record)."""
    meta = RunMeta(run_id=root.name, created_at="2026-01-01T00:00:00Z", cagtool_argv=["cagtool", "run", "train.py"],
                   target={"kind": "script", "name": "train.py"}, target_argv=["train.py"], cwd="/",
                   modes=asked or list(modes), versions={"torch": "2.13.0"}, machine={}, status="finished", exit_code=0)
    data = to_dict(meta)
    data.update(meta_extra or {})
    root.mkdir(parents=True, exist_ok=True)
    (root / "run.json").write_text(json.dumps(data))
    for mode, manifest in modes.items():
        if manifest is None:
            continue
        (root / mode).mkdir()
        (root / mode / "manifest.json").write_text(json.dumps(manifest))
        lines = (events or {}).get(mode, _steps())
        (root / mode / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return root


def test_gate_on_missing_mode_fails_never_reads_another(tmp_path):
    """`gate RUN --max-ca-graphs 1` on a run whose ca mode never ran: fails, naming ca."""
    run = write_run(tmp_path / "r", {"eager": _manifest("eager"), "ca": None})
    code, out, err = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config", "--format", "json")
    assert code == 1, (out, err)
    report = json.loads(out)
    assert report["mode"] == "ca"
    failed = {c["check"]: c["message"] for c in report["checks"] if c["failed"]}
    assert "left no record" in failed["max-ca-graphs"]
    assert "mode-finished" in failed
    # the summary's top-level figures are not eager's under the ca name either
    code, out, _ = cagtool("summary", str(run), "--format", "json")
    body = json.loads(out)
    assert code == 0 and body["mode"] == "ca" and body["mode_recorded"] is False and body["ca_graphs"] is None


def test_gate_on_interrupted_or_failed_mode_fails_with_reason(tmp_path):
    for status in ("interrupted", "failed"):
        run = write_run(tmp_path / status, {"eager": _manifest("eager"), "ca": _manifest("ca", status=status)})
        code, out, _ = cagtool("gate", str(run), "--max-ca-graphs", "1", "--no-config")
        assert code == 1
        assert f"mode-finished (ca): status {status}" in out


def test_gate_on_missing_rank_fails(tmp_path):
    """Rank 1 of 2 left no record and rank 0 failed: the gate says so, though main finished."""
    proc = {"key": "rank0", "pid": 2, "ppid": 1, "rank": 0, "local_rank": 0, "world_size": 2, "role": "child", "argv": []}
    run = write_run(tmp_path / "r", {"ca": _manifest("ca")})
    (run / "ca" / "procs" / "rank0").mkdir(parents=True)
    (run / "ca" / "procs" / "rank0" / "manifest.json").write_text(json.dumps(_manifest("ca", status="failed", process=proc)))
    code, out, _ = cagtool("gate", str(run), "--max-ca-graphs", "5", "--no-config")
    assert code == 1
    assert "process rank0: failed" in out and "rank 1 of world size 2 left no record" in out
