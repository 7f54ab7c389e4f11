"""What a pull request can plant in a record or a baseline never reaches a CI log as a line of its
own, `baseline save` never writes a file `gate --baseline` refuses, and a mode whose launcher saw
it exit otherwise than its record says never passes `mode-finished`: on copies of a real record.

Record (session fixture, conftest.py):
    cagtool run --modes aot,ca --backend eager sample_scripts/graph_breaks.py 60   (the gate tests' record)
Each attack edits a copy: a run directory renamed, a baseline's fields, steps' times, a compile
time, run.json's exit codes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from conftest import cli_in_process
from gate_cli import cagtool, edit, gate_json, one_line_error

pytestmark = pytest.mark.slow

# Workflow commands the GitHub runner obeys at the start of a line (after leading blanks).
_PLANTED = "\n::stop-commands::zzz\ngate passed: 7 checks\n\t::error::FORGED\r\n\u2028::notice::sep"
_OURS = ("::error title=cagtool gate", "::warning title=cagtool gate", "::notice title=cagtool gate")


def _lines(text: str) -> list[str]:
    """The lines a log viewer shows: split at every line break Python knows, blanks stripped."""
    return [line.strip() for line in text.splitlines()]


def _no_planted_line(text: str) -> None:
    for line in _lines(text):
        assert not line.startswith("::") or line.startswith(_OURS), text
        assert line != "gate passed: 7 checks", text


def _on_github(*args: str, cwd: Path) -> tuple[int, str, str]:
    return cli_in_process(*args, env={"GITHUB_ACTIONS": "true"}, cwd=cwd, unset=("GITHUB_STEP_SUMMARY",))


def test_a_run_directory_name_never_starts_a_line_of_the_gate_report_or_the_runs_listing(graph_breaks, work):
    runs = work / ".cagtool" / "runs"
    runs.mkdir(parents=True)
    shutil.copytree(graph_breaks, runs / f"r{_PLANTED}\n")
    code, out, err = _on_github("gate", "--no-config", "--max-ca-graphs", "0", cwd=work)
    assert code == 1, out + err
    _no_planted_line(out + err)
    assert out.splitlines()[0].startswith("cagtool gate: run .cagtool/runs/r\\n::stop-commands::zzz\\ngate passed: 7 checks\\n"), out
    assert any(line.startswith("::error title=cagtool gate%3A max-ca-graphs (ca)::") for line in out.splitlines()), out
    code, out, err = cli_in_process("runs", cwd=work)
    assert code == 0, err
    _no_planted_line(out + err)
    assert len(out.splitlines()) == 2 and "r\\n::stop-commands::zzz\\n" in out, out


def test_a_baselines_target_and_torch_version_never_start_a_line(graph_breaks, work):
    baseline = work / "baseline.json"
    code, _, err = cli_in_process("baseline", "save", str(graph_breaks), "-o", str(baseline), cwd=work)
    assert code == 0, err

    def plant(data: dict) -> None:
        data["target"]["name"] = f"x.py{_PLANTED}"
        data["versions"]["torch"] = f"2.0{_PLANTED}"

    edit(baseline, plant)
    run = work / "run"
    shutil.copytree(graph_breaks, run)
    code, out, err = _on_github("gate", str(run), "--baseline", str(baseline), "--no-config", cwd=work)
    assert code == 0, out + err
    _no_planted_line(out + err)
    warnings = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert any(w.startswith("warning: torch version differs: baseline 2.0\\n::stop-commands::zzz\\n") for w in warnings), out
    assert any(w.startswith("warning: target differs: baseline was recorded from x.py\\n::stop-commands::zzz\\n") for w in warnings), out
    assert [line for line in out.splitlines() if line.startswith("gate ")] == ["gate passed: 5 checks"], out
    # The annotations carry the same text, its newlines as %0A.
    assert any(line.startswith("::warning title=cagtool gate%3A environment::torch version differs: baseline 2.0%0A::stop-commands::zzz%0A")
               for line in out.splitlines()), out
    code, out, err = cli_in_process("baseline", "show", str(baseline), cwd=work)
    assert code == 0, err
    _no_planted_line(out + err)
    assert "torch 2.0\\n::stop-commands::zzz\\n" in out and "target x.py\\n::stop-commands::zzz\\n" in out, out


def _edit_ca_events(run: Path, change) -> None:
    events_file = run / "ca" / "events.jsonl"
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line.strip()]
    change(events)
    events_file.write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "ca" / "columns.json").unlink(missing_ok=True)  # it holds the figures replaced here


def _steps_read_by_a_coarse_clock(events: list[dict]) -> None:
    """One steady step of 1 ns, the others 0 s, in wall and CPU time: each a time the record may
    hold, and their mean (a few hundredths of a nanosecond) a figure no baseline holds."""
    steady = [e for e in events if e["kind"] == "step" and e.get("wall_s") is not None and not e.get("compiles") and not e.get("ca_captures")]
    for i, event in enumerate(steady):
        seconds = 1e-9 if i == 0 else 0.0
        event.update(wall_s=seconds, cpu_s=seconds, thread_cpu_s=seconds)


def _frames_of_nine_days(events: list[dict]) -> None:
    """Every Dynamo frame compiled for 9e5 s, each a time the record may hold; their sum is over
    the 1e6 s a baseline's compile time may be."""
    frames = [e for e in events if e["kind"] == "dynamo_compile" and e.get("entire_frame_compile_time_s")]
    assert len(frames) >= 2
    for frame in frames:
        frame["entire_frame_compile_time_s"] = 9e5


@pytest.mark.parametrize("forge, said", [
    (_steps_read_by_a_coarse_clock, r"mode 'ca' has a bad value \(step_time\.mean_s \d\.\d+e-11 is neither 0 nor at least 1e-09 s\)"),
    (_frames_of_nine_days, r"mode 'ca' has a bad value \(Expected `float` <= 1000000\.0 - at `\$\.compile_time_s`\): compile_time_s is \d+\.\d+"),
], ids=["mean-under-a-nanosecond", "compile-time-over-1e6-s"])
def test_baseline_save_refuses_what_the_baseline_reader_refuses(graph_breaks, work, forge, said):
    """A figure `gate --baseline` would refuse (exit 3) is refused when saving, in one line naming
    the run, the field and the value, and nothing is written: a new file (nor its folder) is not
    made, an old one is left as it was."""
    run = work / "run"
    shutil.copytree(graph_breaks, run)
    _edit_ca_events(run, forge)
    baseline = work / "new" / "baseline.json"
    proc = cagtool("baseline", "save", str(run), "-o", str(baseline), cwd=work)
    one_line_error(proc, 3, f"cagtool: error: not saving the baseline: run {run}: mode 'ca'")
    assert re.search(said, proc.stderr) and proc.stderr.rstrip().endswith(f"; {baseline} is left as it was"), proc.stderr
    assert not baseline.parent.exists()
    kept = work / "kept.json"
    code, _, err = cli_in_process("baseline", "save", str(graph_breaks), "-o", str(kept), cwd=work)
    assert code == 0, err
    before = kept.read_bytes()
    one_line_error(cagtool("baseline", "save", str(run), "-o", str(kept), cwd=work), 3, "not saving the baseline")
    assert kept.read_bytes() == before


def test_the_baseline_reader_names_a_refused_value_held_in_a_dict(graph_breaks, work):
    """msgspec writes a dict's key as `[...]`: the error spells it, with the value."""
    baseline = work / "baseline.json"
    code, _, err = cli_in_process("baseline", "save", str(graph_breaks), "-o", str(baseline), cwd=work)
    assert code == 0, err
    edit(baseline, lambda data: data["modes"]["ca"]["step_time"]["sample"]["units_s"]["p90"].__setitem__(0, 2e9))
    proc = cagtool("baseline", "show", str(baseline), cwd=work)
    one_line_error(proc, 3, f"baseline {baseline}: mode 'ca' has a bad value (")
    assert proc.stderr.rstrip().endswith("- at `$.step_time.sample.units_s[...][0]`): step_time.sample.units_s.p90[0] is 2000000000.0"), proc.stderr


def test_mode_finished_fails_when_the_launcher_saw_another_exit_code(graph_breaks, work):
    """run.json says the ca process exited 1, its record says finished with 0: FAIL, saying both.
    The unedited copy passes; a failure both agree on is a FAIL as before."""
    run = work / "run"
    shutil.copytree(graph_breaks, run)
    gated = ("--no-config", "--max-ca-graphs", "100", "--max-recompiles", "ca:100")
    data = gate_json(str(run), *gated, cwd=work, code=0)
    assert {c["check"]: c["outcome"] for c in data["checks"] if c["mode"] == "ca"}["mode-finished"] == "pass"
    edit(run / "run.json", lambda meta: (meta["mode_exit_codes"].__setitem__("ca", 1), meta.__setitem__("exit_code", 1)))
    data = gate_json(str(run), *gated, cwd=work, code=1)
    finished = next(c for c in data["checks"] if c["check"] == "mode-finished" and c["mode"] == "ca")
    assert finished["outcome"] == "fail", finished
    assert "ca: the launcher recorded exit code 1, but the mode's record says finished with exit code 0" in finished["message"], finished
    proc = cagtool("baseline", "save", str(run), "-o", str(work / "b.json"), cwd=work)
    one_line_error(proc, 2, "the launcher recorded exit code 1")
    assert not (work / "b.json").exists()

    failed = work / "failed"
    shutil.copytree(graph_breaks, failed)
    edit(failed / "ca" / "manifest.json", lambda m: m.update(status="failed", exit_code=7))
    edit(failed / "run.json", lambda meta: (meta["mode_exit_codes"].__setitem__("ca", 7), meta.__setitem__("exit_code", 7)))
    data = gate_json(str(failed), *gated, cwd=work, code=1)
    finished = next(c for c in data["checks"] if c["check"] == "mode-finished" and c["mode"] == "ca")
    assert finished["outcome"] == "fail" and "exit code 7" in finished["message"] and "launcher" not in finished["message"], finished
