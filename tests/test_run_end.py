"""What `cagtool run` does around its modes: the end-of-run code is imported while the
first mode process starts, and the orchestrator says when each mode process has started."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT


def test_warm_imports_leave_nothing_for_the_end_of_run(record_run, tmp_path):
    import shutil

    recorded = record_run("op_loop.py")
    assert recorded.returncode == 0, recorded.stderr
    # A copy: the report is written into the run it reports (never outside it, never through a
    # link), and the session's shared recording stays as it was.
    run = tmp_path / "run"
    shutil.copytree(recorded.path, run, symlinks=True)
    code = f"""
import sys
from pathlib import Path
from cagtool.commands.run import warm_end_of_run_imports
warm_end_of_run_imports(True)
before = set(sys.modules)
from cagtool.commands.summary import print_run_report
from cagtool.commands.report import report_after_run
from cagtool.record.loader import load_run
record = load_run({str(run)!r}, columns=True)
print_run_report(record.path, fmt="text", after_run=True, loaded=record)
report_after_run(record.path, None, record)
late = sorted(m for m in set(sys.modules) - before if m.startswith("cagtool") and not m.startswith("cagtool.report.gate"))
print(late, sorted(m for m in ("pandas", "altair") if m in sys.modules), file=sys.stderr)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(ROOT), env={"CI": "true", **__import__("os").environ})
    assert proc.returncode == 0, proc.stderr
    # cagtool run imports report.gate at its start (the gate flags); everything else was warm.
    assert proc.stderr.strip().splitlines()[-1] == "[] []"
    assert (run / "report.html").is_file()


@pytest.mark.slow
def test_on_started_follows_each_mode_process(tmp_path):
    code = f"""
import json, os
from pathlib import Path
from cagtool.capture.run.orchestrate import RunOptions, run
from cagtool.capture.run.target import check_target
seen = []
def started(name):
    # The mode process exists: its directory and spec were written before it started.
    seen.append((name, os.path.isfile(Path({str(tmp_path / "run")!r}) / name / "spec.json")))
options = RunOptions(target=check_target("tests/scripts/exit_code.py", None, ["0"]), modes=("eager",), repeat=2, output=Path({str(tmp_path / "run")!r}), backend="eager", torch_trace=False)
outcome = run(options, on_started=started)
print(json.dumps({{"seen": seen, "codes": [o.exit_code for o in outcome.outcomes]}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(ROOT), env={"CI": "true", **__import__("os").environ})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"seen": [["eager", True], ["eager.2", True]], "codes": [0, 0]}


def test_a_manifest_the_job_replaced_with_a_fifo_or_a_link_does_not_hang_or_mislead_the_run(tmp_path):
    """The parent closes a mode's manifest the mode process could not (settle_mode_record): it reads
    it as the loader does, so a FIFO the job planted there does not hang cagtool after the job
    ended, and a link is not followed (its target is neither read nor written)."""
    import os
    import stat

    from cagtool.capture.run.orchestrate import settle_mode_record
    from cagtool.record.schema import MANIFEST_FILE, STATUS_KILLED

    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / MANIFEST_FILE)
    assert settle_mode_record(fifo_dir, -9) == STATUS_KILLED  # read as no manifest: killed by its signal
    assert settle_mode_record(fifo_dir, 0) == ""
    assert stat.S_ISFIFO(os.lstat(fifo_dir / MANIFEST_FILE).st_mode)

    target = tmp_path / "elsewhere.json"
    target.write_text('{"status": "running"}')
    link_dir = tmp_path / "link"
    link_dir.mkdir()
    (link_dir / MANIFEST_FILE).symlink_to(target)
    assert settle_mode_record(link_dir, 1) == ""
    assert target.read_text() == '{"status": "running"}'
