"""One process is one piece of evidence: a repetition edited to pass for another process, a
baseline fed a copy of a run it holds, and times no clock gives, on real records.

Records (session fixtures, conftest.py):
    cagtool run --modes eager --backend eager --repeat 7 sample_scripts/mlp_steps.py --steps 40
        seven real processes of one mode (21 pairs), 39 steady steps each
    cagtool run --modes aot,ca --backend eager sample_scripts/graph_breaks.py 60   (the gate tests' record)
Each attack is made from the real steps: a copy of one process's record with its pid and clock
moved on (the loader refuses a plain copy) and its steps edited as the test says.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.report.figures.metrics import record_step_intervals
from cagtool.report.figures.same_steps import same_steps

from gate_cli import cagtool, edit, gate_json, one_line_error

pytestmark = pytest.mark.slow

STEADY = lambda e: e["kind"] == "step" and e.get("wall_s") is not None and not e.get("compiles") and not e.get("ca_captures")  # noqa: E731


@pytest.fixture(scope="module")
def seven(record_run) -> Path:
    run = record_run("mlp_steps.py", "--steps", "40", modes="eager", backend="eager", extra=("--repeat", "7"))
    assert run.returncode == 0, run.stderr
    return run.path


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_events(path: Path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    (path.parent / "columns.json").unlink(missing_ok=True)  # the sidecar holds the times replaced here


def _moved(mode_dir: Path, offset: int) -> None:
    """The record made another process's: its pid, start time and clock reading moved on."""
    def move(manifest: dict) -> None:
        manifest["process"]["pid"] += offset
        if manifest["process"].get("start_ticks") is not None:
            manifest["process"]["start_ticks"] += 100 * offset
        if manifest.get("clock_t0") is not None:
            manifest["clock_t0"] += 10.0 * offset

    edit(mode_dir / "manifest.json", move)


def _copy_as(run: Path, dest: Path, source: str, name: str, edit_walls) -> Path:
    """The run with `source`'s record copied as repetition `name`, its steady steps' wall times
    replaced by edit_walls(list of them)."""
    shutil.copytree(run, dest)
    shutil.copytree(dest / source, dest / name)
    _moved(dest / name, 7)
    events = _events(dest / name / "events.jsonl")
    steady = [e for e in events if STEADY(e)]
    for event, wall in zip(steady, edit_walls([e["wall_s"] for e in steady])):
        event["wall_s"] = wall
    _write_events(dest / name / "events.jsonl", events)
    edit(dest / "run.json", lambda meta: (meta["modes"].append(name), meta.setdefault("mode_exit_codes", {}).__setitem__(name, 0)))
    return dest


def _ticked(times: list[float], tick: float, seed: int) -> list[float]:
    """Step times as a clock of `tick` seconds would read them, its phase drawn at random."""
    clock = random.Random(seed).uniform(0, tick)
    read = []
    for t in times:
        before = math.floor(clock / tick)
        clock += t
        read.append((math.floor(clock / tick) - before) * tick)
    return read


def test_real_processes_of_one_mode_are_never_taken_for_copies(seven, work):
    """21 pairs of real processes of one mode, at the recorder's clock and read at ticks of 1 us to
    15.6 ms (a coarse clock reads many steps alike): none is taken for a copy, and the commands
    that pool them read the run."""
    run = load_run(seven)
    times = [record_step_intervals(run.modes[name])[0] for name in sorted(run.modes)]
    assert len(times) == 7 and all(len(t) >= 30 for t in times)
    for tick in (None, 1e-6, 1e-3, 4e-3, 15.6e-3):
        read = [_ticked(t, tick, k) if tick else t for k, t in enumerate(times)]
        found = [(i, j, f) for i in range(7) for j in range(i + 1, 7) if (f := same_steps(read[i], read[j])) is not None]
        assert not found, (tick, found)
    assert cagtool("summary", seven, cwd=work).returncode == 0
    assert cagtool("baseline", "save", seven, "-o", work / "b.json", cwd=work).returncode == 0


_EDITS = {
    # most steps copied, every 10th scaled and a few nanoseconds added to the others
    "every 10th scaled": lambda w: [t * 1.01 if i % 10 == 0 else t + random.Random(i).randint(-5, 5) * 1e-9 for i, t in enumerate(w)],
    # a few nanoseconds added to each step: no two equal to the nanosecond
    "ns added": lambda w: [t + random.Random(i).randint(-5, 5) * 1e-9 for i, t in enumerate(w)],
    # out of alignment: the first step dropped (each step takes the next one's time)
    "one dropped": lambda w: [*w[1:], w[0] * 1.3],
    # rotated by 13 steps, a few nanoseconds added
    "rotated": lambda w: [t + random.Random(i).randint(-5, 5) * 1e-9 for i, t in enumerate(w[13:] + w[:13])],
}


@pytest.mark.parametrize("how", list(_EDITS))
def test_a_copy_with_steps_edited_or_shifted_is_refused(seven, work, how):
    """A repetition copied from another with its pid and clock edited, and its steps edited so that
    few or none equal the copied ones at their place: refused by every command that pools the
    repetitions (exit 3, one line naming both)."""
    forged = _copy_as(seven, work / "forged", "eager.2", "eager.8", _EDITS[how])
    said = "mode eager: eager.8 and eager.2 have the same step times ("
    for command in (("gate", forged, "--max-regression", "50%", "--baseline", work / "none.json", "--no-config"),
                    ("baseline", "save", forged, "-o", work / "b.json"), ("summary", forged), ("compare", forged)):
        if command[0] == "gate":
            assert cagtool("baseline", "save", seven, "-o", work / "none.json", cwd=work).returncode == 0
        one_line_error(cagtool(*command, cwd=work), 3, said)


def _subset(run: Path, dest: Path, keep: tuple[str, ...]) -> Path:
    """The run holding only the repetitions `keep` (another run of the same job)."""
    shutil.copytree(run, dest)
    meta = json.loads((dest / "run.json").read_text())
    for name in meta["modes"]:
        if name not in keep:
            shutil.rmtree(dest / name)
    meta["modes"] = list(keep)
    meta["mode_exit_codes"] = {k: v for k, v in (meta.get("mode_exit_codes") or {}).items() if k in keep}
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def test_accumulate_refuses_a_copy_of_a_run_it_holds(seven, work):
    """`baseline save --accumulate` refused a run it held by its processes' digests only: the same
    run copied with its pids and clocks edited (new digests) was added, each of its processes
    counted twice. A process whose step figures all equal a held process's is refused (exit 2, one
    line, the file unchanged); another run of the job is added."""
    first = _subset(seven, work / "first", ("eager", "eager.2", "eager.3"))
    second = _subset(seven, work / "second", ("eager.4", "eager.5", "eager.6"))
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", first, "-o", baseline, cwd=work).returncode == 0
    before = baseline.read_text()
    one_line_error(cagtool("baseline", "save", first, "-o", baseline, "--accumulate", cwd=work), 2, "already holds the processes of run")
    copy = Path(shutil.copytree(first, work / "copy"))
    for offset, name in enumerate(("eager", "eager.2", "eager.3"), start=1):
        _moved(copy / name, 1000 + offset)
    one_line_error(cagtool("baseline", "save", copy, "-o", baseline, "--accumulate", cwd=work), 2,
                   "process 1 of mode eager of run mlp_steps has the step figures of a process it already holds (median ")
    assert baseline.read_text() == before
    proc = cagtool("baseline", "save", second, "-o", baseline, "--accumulate", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(baseline.read_text())["modes"]["eager"]["step_time"]["sample"]["repetitions"] == 6


def _with_device_times(run: Path, dest: Path, modes: tuple[str, ...], bad: dict[str, tuple[int, float]]) -> Path:
    """The run as a CUDA job's record: a device time for every step (its wall time, 0.9x), as the
    recorder writes them (`step_device` events); bad[mode] = (steady step index, the time written)."""
    shutil.copytree(run, dest)
    for mode in modes:
        events = _events(dest / mode / "events.jsonl")
        steady = [e["step"] for e in events if STEADY(e)]
        seq = max(e["seq"] for e in events)
        end = max(e["t"] for e in events)
        added = []
        for e in events:
            if e["kind"] == "step" and e.get("wall_s") is not None:
                seq += 1
                added.append({"kind": "step_device", "seq": seq, "t": end, "step": e["step"], "device_s": 0.9 * e["wall_s"]})
        if mode in bad:
            index, value = bad[mode]
            next(a for a in added if a["step"] == steady[index])["device_s"] = value
        _write_events(dest / mode / "events.jsonl", events + added)
    return dest


@pytest.mark.parametrize("value", [float("nan"), 2e9, -1.0])
def test_a_device_time_that_is_no_time_is_refused_by_every_reader(graph_breaks, work, value):
    """Device times that are no time (NaN, 1e9 s and more, negative) were taken as step times: a
    check read NaN figures, or 2e9 s, and judged on them. No recorder writes one: the record is
    refused where it is read (exit 3), naming the file, the line and the field, by the gate,
    `baseline save` and compare alike."""
    clean = _with_device_times(graph_breaks, work / "clean", ("aot", "ca"), {})
    data = gate_json(clean, "--min-speedup", "0.01", "--no-config", cwd=work, code=0, load_may_decide=True)
    assert next(c for c in data["checks"] if c["check"] == "min-speedup")["data"]["measure"] == "device"
    damaged = _with_device_times(graph_breaks, work / "damaged", ("aot", "ca"), {"ca": (3, value)})
    for args in (("gate", damaged, "--min-speedup", "0.01", "--no-config"), ("baseline", "save", damaged, "-o", work / "b.json"),
                 ("compare", damaged)):
        one_line_error(cagtool(*args, cwd=work), 3, "ca/events.jsonl: line ")
    assert not (work / "b.json").exists()


def test_compare_names_a_process_whose_figure_is_0_s(graph_breaks, work):
    """A process of a repetition whose median step read 0 s (a clock coarser than its steps) was
    dropped from its side by `compare` without a word, and the speedup judged on the rest. It is
    now named, and no ratio is formed (as the gate's check is an ERROR naming it)."""
    run = Path(shutil.copytree(graph_breaks, work / "run"))
    shutil.copytree(run / "ca", run / "ca.2")
    _moved(run / "ca.2", 2)
    events = _events(run / "ca.2" / "events.jsonl")
    for i, event in enumerate(e for e in events if STEADY(e)):
        event["wall_s"] = 0.0 if i % 3 else event["wall_s"] * random.Random(i).uniform(0.9, 1.1)
        for key in ("cpu_s", "thread_cpu_s"):
            event.pop(key, None)
    _write_events(run / "ca.2" / "events.jsonl", events)
    edit(run / "run.json", lambda meta: (meta["modes"].append("ca.2"), meta.setdefault("mode_exit_codes", {}).__setitem__("ca.2", 0)))
    compared = cagtool("compare", run, "--format", "json", cwd=work)
    assert compared.returncode == 0, compared.stderr
    speedup = json.loads(compared.stdout)["speedups"]["ca/aot"]
    assert speedup["speedup"] is None and speedup["note"] == (
        "not compared: process 2 of ca: its median step time is 0 s (a clock coarser than its steps), no ratio can be formed from it: "
        "time more work a step"), speedup
    text = cagtool("compare", run, cwd=work)
    assert text.returncode == 0 and "process 2 of ca: its median step time is 0 s" in " ".join(text.stdout.split()), text.stdout
    data = gate_json(run, "--min-speedup", "0.01", "--no-config", cwd=work, code=1)
    check = next(c for c in data["checks"] if c["check"] == "min-speedup")
    assert check["outcome"] == "error" and "process 2 of ca of this run: its median step time is 0 s" in check["message"]
