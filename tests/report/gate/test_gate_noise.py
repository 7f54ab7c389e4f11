"""The gate's noise rule where it was weakest, end to end on a real record and records derived from it:
a slower tail under an unchanged median, and compile time (one figure per run).

Record (shared with test_gate_cli.py through the session fixture):
    cagtool run --modes aot,ca --backend eager sample_scripts/graph_breaks.py 60   ~58 steady steps
Derived records change only what the test is about (step times of the slowest quarter of the
steady steps; compile times of copied repetitions), so the rest stays what torch recorded. Limits
are derived from the record's own figures, never from exact timings of this machine.
"""

from __future__ import annotations

import html
import json
import math
import random
import re
import shutil
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.report.gate.baseline import load_baseline, run_snapshots
from cagtool.report.text.markdown import md_text
from cagtool.report.figures.metrics import mode_metrics

from gate_cli import cagtool, edit, gate_json, machine_free_copy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_run(graph_breaks) -> Path:  # conftest's recording of graph_breaks.py 60, aot and ca
    return graph_breaks


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_events(path: Path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


def slow_tail_copy(run: Path, dest: Path, mode: str = "ca") -> Path:
    """The run with a stall in a quarter of its steady steps, spread through the run as a periodic
    checkpoint is: the slowest of every 4 consecutive steady steps now takes 6x the slowest step
    the run had (beyond the run-to-run noise assumed with one process a side). Steps below the slowest of their four are untouched, so the median moves little;
    every stretch of the run has its stalls, so every batch's p90 sees them (the slowest quarter of
    a real run clusters wherever the machine was busy, and a batch without a stall would rightly
    widen the interval)."""
    shutil.copytree(run, dest)
    events_file = dest / mode / "events.jsonl"
    events = _events(events_file)
    steady = [e for e in events if e["kind"] == "step" and e.get("wall_s") is not None and not e.get("compiles") and not e.get("ca_captures")]
    slowest = max(e["wall_s"] for e in steady)
    for start in range(0, len(steady) - 3, 4):
        max(steady[start : start + 4], key=lambda e: e["wall_s"])["wall_s"] = 6 * slowest
    _write_events(events_file, events)
    return dest


def test_a_slower_tail_warns_under_a_median_threshold_and_fails_a_p90_one(real_run, work):
    # Steady steps of a fixed series first: on a loaded machine a real run's step times come in
    # phases, and a stall in every fourth step moves the median of such a run by more than 10%.
    real_run = machine_free_copy(real_run, work / "steady")
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", real_run, "-o", baseline, cwd=work).returncode == 0
    saved = load_baseline(baseline).modes["ca"].step_time
    assert saved.sample is not None and len(saved.sample.units["p90"]) == 1  # one process: one figure
    # The run against its own baseline: no tail warning (one process a side: the assumed noise
    # cannot tell 20%, exit 5).
    same = gate_json(real_run, "--baseline", baseline, "--max-regression", "20%", "--no-config", cwd=work, code=5)
    assert [c["warnings"] for c in same["checks"] if c["check"] == "max-regression"] == [[]]

    slow = slow_tail_copy(real_run, work / "slow-tail")
    before, after = mode_metrics(load_run(real_run).modes["ca"]).step_time, mode_metrics(load_run(slow).modes["ca"]).step_time
    assert after.median_s < 1.1 * before.median_s and after.p90_s > 2 * before.p90_s  # what the derived record is

    # Median threshold only: does not fail (the median hardly moved; one process a side cannot
    # pass 20% either), with one warning line naming the tail.
    data = gate_json(slow, "--baseline", baseline, "--max-regression", "20%", "--no-config", cwd=work, code=5)
    median = next(c for c in data["checks"] if c["check"] == "max-regression")
    assert median["outcome"] == "inconclusive" and median["data"]["tail"]["verdict"] == "above"
    [warning] = median["warnings"]
    assert warning.startswith("max-regression (ca): slower tail: step time p90 ") and "> +20% (90% CI" in warning
    assert warning.endswith("gate the tail with --max-regression p90:20%")
    text = cagtool("gate", slow, "--baseline", baseline, "--max-regression", "20%", "--no-config", cwd=work)
    assert text.returncode == 5
    assert f"  warning: {warning}" in text.stdout.splitlines()  # one line, unwrapped, greppable
    github = cagtool("gate", slow, "--baseline", baseline, "--max-regression", "20%", "--no-config", cwd=work,
                     env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(work / "summary.md")})
    assert "::warning title=cagtool gate%3A max-regression (ca)::max-regression (ca): slower tail" in github.stdout
    assert f"> **warning:** {md_text(warning)}" in (work / "summary.md").read_text()
    # The gate kept its result in the run: the HTML report shows the warning too.
    assert cagtool("report", slow, "-o", work / "report.html", cwd=work).returncode == 0
    assert f"warning: {html.escape(warning, quote=False)}" in (work / "report.html").read_text()

    # A p90 threshold fails on it, by the same rule: the whole interval of the p90 ratio is beyond +20%.
    failed = gate_json(slow, "--baseline", baseline, "--max-regression", "20%", "--max-regression", "p90:20%", "--no-config", cwd=work, code=1)
    tail = next(c for c in failed["checks"] if c["check"] == "max-regression:p90")
    assert tail["outcome"] == "fail" and tail["data"]["low"] > 1.2 and tail["data"]["range"] == "90% CI"
    assert tail["message"].startswith("max-regression:p90 (ca): step time p90 ") and "> +20% (90% CI" in tail["message"]
    assert all(not c["warnings"] for c in failed["checks"])  # the tail has its own check: no second word on it
    junit = work / "gate.xml"
    assert cagtool("gate", slow, "--baseline", baseline, "--max-regression", "p90:20%", "--no-config", "--junit", junit, cwd=work).returncode == 1
    assert 'name="max-regression:p90"' in junit.read_text() and 'type="regression"' in junit.read_text()


def test_a_baseline_from_an_older_cagtool_is_an_error_that_says_resave(real_run, work):
    """Baselines saved before the per-batch step times: no interval can be built, so a step-time
    check is an error (never a guess, never a silent pass) that says to re-save it."""
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", real_run, "-o", baseline, cwd=work).returncode == 0
    edit(baseline, lambda d: [d["modes"][m]["step_time"].pop("sample") for m in d["modes"]])
    data = gate_json(real_run, "--baseline", baseline, "--max-regression", "p90:20%", "--no-config", cwd=work, code=1)
    tail = next(c for c in data["checks"] if c["check"] == "max-regression:p90")
    assert tail["outcome"] == "error" and "re-save it (cagtool baseline save RUN)" in tail["message"]


def as_another_process(mode_dir: Path, offset: int) -> None:
    """A copied mode record made the record of another process, as each repetition of --repeat
    is: its pid, start time and clock reading moved on (the loader refuses a plain copy), and its
    step times each within +-0.5% of the copied ones (seeded): no two processes time their steps
    alike to the nanosecond, and the gate refuses two that do."""
    def moved(manifest: dict) -> None:
        process = manifest["process"]
        process["pid"] += offset
        if process.get("start_ticks") is not None:
            process["start_ticks"] += 100 * offset
        if manifest.get("clock_t0") is not None:
            manifest["clock_t0"] += 10.0 * offset

    edit(mode_dir / "manifest.json", moved)
    draw = random.Random(offset)
    events = _events(mode_dir / "events.jsonl")
    for event in events:
        if event["kind"] == "step":
            for key in ("wall_s", "cpu_s", "thread_cpu_s"):
                if event.get(key):
                    event[key] *= draw.uniform(0.995, 1.005)
    _write_events(mode_dir / "events.jsonl", events)
    (mode_dir / "columns.json").unlink(missing_ok=True)  # it holds the times replaced here


def repeated_copy(run: Path, dest: Path, factors: tuple[float, ...], mode: str = "ca") -> Path:
    """The run as if recorded with --repeat: repetition k (`ca.2`, ...) is a copy of the mode whose
    compile times (Dynamo entire-frame and CA capture) are scaled by factors[k - 2]. Without the
    machine's load as the real run read it (cpu_wait.json): the compile times are this test's
    figures, and a busy runner's wait where the real run compiled would make the gate's verdict on
    them the load's (INCONCLUSIVE, test_gate_checks.py tests that rule)."""
    shutil.copytree(run, dest)
    for readings in dest.glob("*/cpu_wait.json"):
        readings.unlink()
    meta = json.loads((dest / "run.json").read_text())
    for index, factor in enumerate(factors, start=2):
        name = f"{mode}.{index}"
        shutil.copytree(dest / mode, dest / name)
        as_another_process(dest / name, index)
        edit_compile(dest, factor, mode=name)
        meta["modes"].append(name)
        meta.setdefault("mode_exit_codes", {})[name] = 0
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def test_compile_time_noise_unmeasured_or_from_the_baselines_runs(real_run, work):
    compile_s = mode_metrics(load_run(real_run).modes["ca"]).compile_time_s
    assert compile_s > 0
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", real_run, "-o", baseline, cwd=work).returncode == 0
    args = ("--baseline", baseline, "--max-compile-regression", "25%", "--no-config")

    # One figure per side: the run-to-run noise is assumed, and the line says so; +20% or +30%
    # cannot be told from it (exit 5), 3x can.
    for factor, code, outcome in ((1.2, 5, "inconclusive"), (1.3, 5, "inconclusive"), (3.0, 1, "fail")):
        slower = work / f"slower-{factor}"
        repeated_copy(real_run, slower, ())
        edit_compile(slower, factor)
        data = gate_json(slower, *args, cwd=work, code=code)
        check = next(c for c in data["checks"] if c["check"] == "max-compile-regression")
        assert check["outcome"] == outcome and check["data"]["noise_measured"] is False, check["message"]
        assert any("compile time, 1 vs 1 process: run-to-run noise not measured, assumed" in n for n in check["notes"])
        assert check["data"]["ratio"] == pytest.approx(factor, rel=1e-3)

    # A baseline from three repetitions (0.8x, 1x, 1.2x): their spread is the measured noise the
    # run's one figure is judged against; 1.3x is then inconclusive against a 25% threshold, and
    # the line names the samples compared.
    repeated = repeated_copy(real_run, work / "repeated", (0.8, 1.2))
    assert [len(s.compile_samples) for n, s in run_snapshots(load_run(repeated)).items() if n == "ca"] == [3]
    wide = work / "wide.json"
    assert cagtool("baseline", "save", repeated, "-o", wide, cwd=work).returncode == 0
    assert sorted(load_baseline(wide).modes["ca"].compile_samples) == pytest.approx([0.8 * compile_s, compile_s, 1.2 * compile_s], rel=1e-4)
    data = gate_json(work / "slower-1.3", "--baseline", wide, "--max-compile-regression", "25%", "--no-config", cwd=work, code=5)
    check = next(c for c in data["checks"] if c["check"] == "max-compile-regression")
    found = re.search(r"baseline median ([0-9.]+) (m?s) of 3 runs", check["message"])  # ms below a second
    assert check["data"]["noise_measured"] and check["data"]["method"] == "t" and found, check["message"]
    shown = float(found.group(1)) / (1000 if found.group(2) == "ms" else 1)
    assert shown == pytest.approx(compile_s, abs=0.0011), check["message"]
    assert check["data"]["low"] < 1.25 < check["data"]["high"] and "inconclusive" in check["message"]


def edit_compile(run: Path, factor: float, mode: str = "ca") -> None:
    events = _events(run / mode / "events.jsonl")
    for event in events:
        if event["kind"] == "dynamo_compile" and event.get("entire_frame_compile_time_s"):
            event["entire_frame_compile_time_s"] *= factor
        if event["kind"] == "ca_graph" and event.get("capture_s"):
            event["capture_s"] *= factor
    _write_events(run / mode / "events.jsonl", events)


def test_baseline_save_accumulate_gives_compile_time_a_measured_spread(real_run, work):
    baseline = work / "baseline.json"
    runs = []
    for offset, factor in enumerate((1.0, 0.9, 1.1)):
        copy = repeated_copy(real_run, work / f"run-{factor}", ())
        edit_compile(copy, factor)
        for mode in ("aot", "ca"):  # three runs, each of its own processes (the same ones are refused below)
            as_another_process(copy / mode, 1000 * offset)
        runs.append(copy)
    assert cagtool("baseline", "save", runs[0], "-o", baseline, cwd=work).returncode == 0
    assert load_baseline(baseline).modes["ca"].compile_time_samples_s == ()
    for copy in runs[1:]:
        proc = cagtool("baseline", "save", copy, "-o", baseline, "--accumulate", cwd=work)
        assert proc.returncode == 0, proc.stderr
    assert "compile times held: aot: 3, ca: 3" in proc.stdout
    saved = load_baseline(baseline).modes["ca"]
    compile_s = mode_metrics(load_run(real_run).modes["ca"]).compile_time_s
    assert saved.compile_samples == pytest.approx((compile_s, 0.9 * compile_s, 1.1 * compile_s), rel=1e-4)
    # The compile time is the median of those held (as a run's of its repetitions), not the newest run's:
    # the gate prints it as "median ... of 3 runs" and measures a seconds threshold from it.
    assert saved.compile_time_s == pytest.approx(compile_s, rel=1e-4)
    show = cagtool("baseline", "show", baseline, cwd=work)
    # The figures as saved (six significant digits), printed to three decimals.
    low, high = min(saved.compile_samples), max(saved.compile_samples)
    assert show.returncode == 0 and f"(3 compile times, {low:.3f}-{high:.3f} s)" in show.stdout
    data = gate_json(real_run, "--baseline", baseline, "--max-compile-regression", "100%", "--no-config", cwd=work, code=0)
    check = next(c for c in data["checks"] if c["check"] == "max-compile-regression")
    assert check["data"]["noise_measured"] is True
    assert check["data"]["change_pct"] == pytest.approx(0.0, abs=0.05), check["message"]  # the same run against the median
    # Another target's compile times are not comparable: refused, a usage error.
    edit(baseline, lambda d: d["target"].update(name="other.py"))
    refused = cagtool("baseline", "save", runs[0], "-o", baseline, "--accumulate", cwd=work)
    assert refused.returncode == 2 and "holds other.py" in refused.stderr


def _one_line_error(proc, code: int, said: str) -> None:
    assert proc.returncode == code and said in proc.stderr and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_one_process_is_never_counted_as_several(real_run, work):
    """A mode listed twice in run.json, a repetition that is a byte copy of another, and a run
    accumulated twice into a baseline would each count one process as several that agree: the
    measured noise shrinks to nothing, and a run passes (or an unchanged one fails) on it."""
    baseline = work / "baseline.json"
    three = repeated_copy(real_run, work / "three", (1.0, 1.0))  # ca, ca.2, ca.3: three processes
    assert cagtool("baseline", "save", three, "-o", baseline, cwd=work).returncode == 0
    args = ("--baseline", baseline, "--max-regression", "25%", "--no-config")
    gate_json(three, *args, cwd=work, code=0, load_may_decide=True)

    listed_twice = Path(shutil.copytree(real_run, work / "listed-twice"))
    edit(listed_twice / "run.json", lambda meta: meta["modes"].extend(["ca", "ca", "ca", "ca"]))
    _one_line_error(cagtool("gate", listed_twice, *args, cwd=work), 3, "lists mode 'ca' 5 times")

    copied = Path(shutil.copytree(three, work / "copied"))
    for index in (4, 5):  # plain copies: the same process as ca
        shutil.copytree(copied / "ca", copied / f"ca.{index}")
    edit(copied / "run.json", lambda meta: meta["modes"].extend(["ca.4", "ca.5"]))
    _one_line_error(cagtool("gate", copied, *args, cwd=work), 3, "ca.4 is a copy of ca")
    _one_line_error(cagtool("summary", copied, cwd=work), 3, "ca.4 is a copy of ca")

    # The baseline's run added again: refused, the file unchanged; another run's processes are added.
    before = baseline.read_text()
    _one_line_error(cagtool("baseline", "save", three, "-o", baseline, "--accumulate", cwd=work), 2, "already holds the processes of run")
    assert baseline.read_text() == before
    other = repeated_copy(real_run, work / "other", (1.0, 1.0))
    for mode in ("aot", "ca", "ca.2", "ca.3"):
        as_another_process(other / mode, 1000)
    assert cagtool("baseline", "save", other, "-o", baseline, "--accumulate", cwd=work).returncode == 0
    saved = load_baseline(baseline)
    assert saved.modes["ca"].step_time.sample.repetitions == 6 and len(saved.processes) == 8
    # A baseline saved before the processes were kept: the run it holds is known by its figures.
    edit(baseline, lambda d: d.pop("processes"))
    _one_line_error(cagtool("baseline", "save", other, "-o", baseline, "--accumulate", cwd=work), 2, "has the step figures of a process it already holds")


def test_a_baseline_step_figure_no_run_gives_is_refused_not_a_crash(real_run, work):
    """A step of 1e-300 s or 1e300 s overflowed the gate's interval arithmetic (exit 4, internal
    error); a share of waiting of exactly 1 made "up to 1e+09x": each is refused, naming its field."""
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", real_run, "-o", baseline, cwd=work).returncode == 0
    args = ("--baseline", baseline, "--max-regression", "25%", "--max-compile-regression", "50%", "--no-config")
    for key, value in (("units_s", 1e-300), ("units_s", 1e300), ("cpu_units_s", 5e-10)):
        forged = work / f"forged-{key}-{value}.json"
        forged.write_text(baseline.read_text())
        edit(forged, lambda d: d["modes"]["ca"]["step_time"]["sample"][key]["median"].__setitem__(0, value))
        _one_line_error(cagtool("gate", real_run, *args[:1], forged, *args[2:], cwd=work), 3, f"step_time.sample.{key}")
    forged = work / "forged-wait.json"
    forged.write_text(baseline.read_text())
    edit(forged, lambda d: d["modes"]["ca"]["step_time"].__setitem__("cpu_wait", 1.0))
    _one_line_error(cagtool("gate", real_run, "--baseline", forged, *args[2:], cwd=work), 3, "cpu_wait")


def _scale_steps(mode_dir: Path, scale) -> None:
    """Each steady step's wall and CPU times set to scale(i, time), i its place among them."""
    events = _events(mode_dir / "events.jsonl")
    steady = [e for e in events if e["kind"] == "step" and e.get("wall_s") is not None and not e.get("compiles") and not e.get("ca_captures")]
    for i, event in enumerate(steady):
        for key in ("wall_s", "cpu_s", "thread_cpu_s"):
            if event.get(key) is not None:
                event[key] = scale(i, event[key])
    _write_events(mode_dir / "events.jsonl", events)
    (mode_dir / "columns.json").unlink(missing_ok=True)


def test_one_process_edited_to_look_like_another_is_refused_and_a_coarse_clock_is_not(real_run, work):
    """A repetition copied from another with its pid and clock edited passed the loader's check (its
    manifest is another's) and counted one process as two that agree. Two processes never time
    their steps alike to the nanosecond: refused (exit 3), naming both, also with a few steps edited.
    Real processes read by a clock coarser than their steps (a 4 ms tick: many steps equal) are not."""
    three = repeated_copy(real_run, work / "three", (1.0, 1.0))
    args = ("--min-speedup", "0.01", "--no-config")
    forged = Path(shutil.copytree(three, work / "forged"))
    shutil.copytree(forged / "ca", forged / "ca.4")
    edit(forged / "ca.4" / "manifest.json", lambda m: (m["process"].update(pid=m["process"]["pid"] + 4), m.update(clock_t0=m["clock_t0"] + 1.0)))
    edit(forged / "run.json", lambda meta: meta["modes"].append("ca.4"))
    for command in (("gate", forged, *args), ("baseline", "save", forged, "-o", work / "b.json"), ("summary", forged)):
        _one_line_error(cagtool(*command, cwd=work), 3, "mode ca: ca.4 and ca have the same step times")
    _scale_steps(forged / "ca.4", lambda i, t: t * 1.01 if i % 5 == 0 else t)  # a fifth of its steps edited
    _one_line_error(cagtool("gate", forged, *args, cwd=work), 3, "ca.4 and ca have the same step times")

    # The real processes' steps read at a 4 ms tick, the clock starting at a random phase in each.
    coarse = Path(shutil.copytree(three, work / "coarse"))
    tick = 0.004
    for index, mode in enumerate(("ca", "ca.2", "ca.3")):
        phase = random.Random(index).uniform(0, tick)
        ends: list[float] = []
        _scale_steps(coarse / mode, lambda i, t: t)  # the sidecar gone: read from the events
        events = _events(coarse / mode / "events.jsonl")
        clock = phase
        for event in events:
            if event["kind"] == "step" and event.get("wall_s") is not None:
                before = math.floor(clock / tick)
                clock += event["wall_s"]
                event["wall_s"] = (math.floor(clock / tick) - before) * tick
                ends.append(event["wall_s"])
        _write_events(coarse / mode / "events.jsonl", events)
    proc = cagtool("gate", coarse, "--min-speedup", "0.01", "--no-config", cwd=work)
    assert proc.returncode in (0, 1, 5) and "same step times" not in proc.stdout + proc.stderr, proc.stderr


def test_a_process_a_check_cannot_count_is_named_and_never_passes(real_run, work):
    """A process whose steps were no time (1e9 s and more) was left out unsaid, and a side passed on
    the processes left; a figure of 0 s was dropped the same way. Steps of no time are refused where
    the record is read (exit 3: no recorder writes one), by the gate and `baseline save` alike, and
    a coarse clock's 0 s steps are read: a median above 0 is judged, a p10 of 0 s is the error that
    names it."""
    three = repeated_copy(real_run, work / "three", (1.0, 1.0))
    baseline = work / "baseline.json"
    assert cagtool("baseline", "save", three, "-o", baseline, cwd=work).returncode == 0
    args = ("--baseline", baseline, "--max-regression", "100%", "--no-config")
    gate_json(three, *args, cwd=work, code=0, load_may_decide=True)

    damaged = Path(shutil.copytree(three, work / "damaged"))
    _scale_steps(damaged / "ca.3", lambda i, t: 2e9)
    _one_line_error(cagtool("gate", damaged, *args, "--min-speedup", "0.01", cwd=work), 3, "ca.3/events.jsonl: line ")
    _one_line_error(cagtool("baseline", "save", damaged, "-o", work / "d.json", cwd=work), 3, "ca.3/events.jsonl: line ")
    partly = Path(shutil.copytree(three, work / "partly"))
    _scale_steps(partly / "ca.2", lambda i, t: float("nan") if i == 4 else t)
    _one_line_error(cagtool("gate", partly, *args, cwd=work), 3, "ca.2/events.jsonl: line ")

    # A coarse clock's steps: every third step of process 2 reads 0 s.
    zeros = Path(shutil.copytree(three, work / "zeros"))
    _scale_steps(zeros / "ca.2", lambda i, t: 0.0 if i % 3 == 0 else t)
    median = cagtool("gate", zeros, "--format", "json", *args, cwd=work)
    assert median.returncode in (0, 5), median.stdout  # judged, not an error (a busy runner's load may leave it inconclusive)
    assert next(c for c in json.loads(median.stdout)["checks"] if c["check"] == "max-regression")["outcome"] in ("pass", "inconclusive")
    p10 = gate_json(zeros, *args[:2], "--max-regression", "p10:100%", "--no-config", cwd=work, code=1)
    check = next(c for c in p10["checks"] if c["check"] == "max-regression:p10")
    assert check["outcome"] == "error" and "process 2 of this run: its p10 step time is 0 s" in check["message"], check["message"]
    # Saved as a baseline, its 0 s p10 reads back, and the check against it names it.
    zero_base = work / "zero-base.json"
    assert cagtool("baseline", "save", zeros, "-o", zero_base, cwd=work).returncode == 0
    against = gate_json(three, "--baseline", zero_base, "--max-regression", "p10:100%", "--no-config", cwd=work, code=1)
    check = next(c for c in against["checks"] if c["check"] == "max-regression:p10")
    assert check["outcome"] == "error" and "process 2 of the baseline: its p10 step time is 0 s" in check["message"]


def test_an_odd_block_of_three_is_named_by_the_speedup(real_run, work):
    """Modes of one run in fewer than 5 blocks were not checked for an odd block: three blocks whose
    ca/aot ratios read 1x, 1x and 37x gave a wide interval and no word of why. The third block is
    set apart and named (a warning, `outliers` in JSON with side "block"), and the advice is a rerun."""
    three = repeated_copy(real_run, work / "three", (1.0, 1.0), mode="ca")
    for index in (2, 3):
        shutil.copytree(three / "aot", three / f"aot.{index}")
        as_another_process(three / f"aot.{index}", 10 + index)
    edit(three / "run.json", lambda meta: meta["modes"].extend(["aot.2", "aot.3"]))
    # The minimum is the recording's own ca/aot ratio (a busy runner moves it far from 1x), so the
    # blocks that agree leave the check undecided whatever it was.
    before = json.loads(cagtool("gate", "--format", "json", str(three), "--min-speedup", "0.9", "--no-config", cwd=work).stdout)
    ratio = next(c for c in before["checks"] if c["check"] == "min-speedup")["data"]["speedup"]
    _scale_steps(three / "ca.3", lambda i, t: 37 * t)
    data = gate_json(three, "--min-speedup", f"{ratio:.6g}", "--no-config", cwd=work, code=5)
    check = next(c for c in data["checks"] if c["check"] == "min-speedup")
    assert [(o["side"], o["process"]) for o in check["data"]["outliers"]] == [("block", 3)], check
    [warning] = [w for w in check["warnings"] if "block 3" in w]
    assert warning.startswith("min-speedup (ca/aot): block 3 (the processes of repetition 3): its ratio of median step time was ")
    assert warning.endswith("rerun on a quieter runner") and any(n.endswith("keeps it from a verdict: rerun") for n in check["notes"]), check
