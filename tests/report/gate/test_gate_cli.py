"""`cagtool gate` and `cagtool baseline` end to end, on real records of the sample scripts.

Records (shared with the other tests through the session fixture):
    cagtool run --modes ca --backend eager sample_scripts/op_loop.py          4 CA graphs, 3 CA recompiles
    cagtool run --modes aot,ca --backend eager sample_scripts/graph_breaks.py 60   2 graph breaks, ~58 steady steps
Limits are derived from the record's own metrics (N passes, N-1 fails, N+1 is an improvement),
so the tests check the gate, not the exact numbers capture produces.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.report.gate.baseline import load_baseline
from cagtool.report.figures.metrics import mode_metrics

from conftest import private_copy
from gate_cli import cagtool, edit, gate_json, machine_free_copy, outcomes

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def op_loop(record_run, tmp_path_factory):
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    return private_copy(run.path, tmp_path_factory.mktemp("gated") / "op_loop")  # the gates write gate.json into it


# ------------------------------------------------------------------ count thresholds

@pytest.mark.parametrize("flag, check, metric", [
    ("--max-ca-graphs", "max-ca-graphs", "ca_graphs"),
    ("--max-recompiles", "max-recompiles", "recompiles"),
    ("--max-recompiles ca:", "max-recompiles:ca", "ca_recompiles"),
    ("--max-graph-breaks", "max-graph-breaks", "graph_breaks"),
])
def test_count_thresholds_pass_fail_and_improve(op_loop, work, flag, check, metric):
    actual = getattr(mode_metrics(load_run(op_loop).mode("ca")), metric)
    assert actual >= 1, f"op_loop.py should show at least one {metric}"
    option, _, kind = flag.partition(" ")

    def run(limit: int, *extra: str, code: int) -> dict:
        return gate_json(op_loop, option, f"{kind}{limit}", *extra, cwd=work, code=code)

    passed = run(actual, code=0)
    assert outcomes(passed)[check] == "pass"
    assert passed["checks"][-1]["data"]["actual"] == actual
    failed = run(actual - 1, code=1)
    assert outcomes(failed)[check] == "fail"
    assert [c["check"] for c in failed["checks"] if c["failed"]] == [check]
    improved = run(actual + 1, code=0)
    assert outcomes(improved)[check] == "improved"
    strict = run(actual + 1, "--fail-on-improvement", code=1)
    assert outcomes(strict)[check] == "improved" and strict["checks"][-1]["failed"]


def test_min_speedup_pass_and_fail(graph_breaks, work):
    """On the run's aot and ca step times made a fixed series (machine_free_copy): on a loaded
    machine the real interval can be wide enough to hold 100x, which reads as within the noise."""
    run = machine_free_copy(graph_breaks, work / "steady", modes=("aot", "ca"))
    passed = gate_json(run, "--min-speedup", "0.01", cwd=work, code=0)
    speedup = [c for c in passed["checks"] if c["check"] == "min-speedup"][0]
    assert speedup["mode"] == "ca/aot" and speedup["outcome"] == "pass" and speedup["data"]["speedup"] > 0
    failed = gate_json(run, "--min-speedup", "ca/aot:100x", cwd=work, code=1)
    assert outcomes(failed)["min-speedup"] == "fail"
    # A pair the run did not record is an error, never a pass.
    missing = gate_json(run, "--min-speedup", "ca/eager:0.01", cwd=work, code=1)
    assert outcomes(missing)["min-speedup"] == "error"


def test_text_report(op_loop, work):
    actual = mode_metrics(load_run(op_loop).mode("ca")).ca_graphs
    proc = cagtool("gate", op_loop, "--max-ca-graphs", "1", "--max-graph-breaks", "9", cwd=work)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == f"cagtool gate: run {op_loop}, mode ca"
    assert any(line.startswith("max-ca-graphs ") and "FAIL" in line for line in lines)
    assert any(line.startswith("FAIL: max-ca-graphs (ca): CA graphs ") and line.endswith(f"{actual} > 1 allowed (+{actual - 1})") for line in lines)
    assert "IMPROVED: max-graph-breaks (ca): graph breaks" in proc.stdout
    assert lines[-1] == "gate FAILED: 1 of 3 checks failed, 1 improved"


def test_a_ca_limit_with_another_gated_mode_says_it_counts_the_ca_mode(graph_breaks, work):
    """`gate --mode aot --max-ca-graphs N` counts the ca mode's CA graphs (aot captures none: its 0
    would pass on a run that never measured CA). The header said `mode aot` above a row on ca: it
    names the check's mode now, the check's note says why, and --format json has it in the check."""
    actual = mode_metrics(load_run(graph_breaks).mode("ca")).ca_graphs
    assert actual >= 1
    proc = cagtool("gate", graph_breaks, "--mode", "aot", "--max-ca-graphs", str(actual - 1), "--no-config", cwd=work)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"cagtool gate: run {graph_breaks}, mode aot (max-ca-graphs on mode ca: only ca captures CA graphs)"
    assert any(line.split()[:2] == ["max-ca-graphs", "ca"] and "FAIL" in line for line in lines)
    assert "  note: counted on mode ca, not on the gated mode aot: only the ca mode captures CA graphs (aot's count is 0 by design" in proc.stdout
    data = gate_json(graph_breaks, "--mode", "aot", "--max-ca-graphs", str(actual), "--no-config", cwd=work, code=0)
    check = next(c for c in data["checks"] if c["check"] == "max-ca-graphs")
    assert data["mode"] == "aot" and check["mode"] == "ca" and check["outcome"] == "pass" and check["data"]["gated_mode"] == "aot"
    assert check["notes"][0].startswith("counted on mode ca, not on the gated mode aot")


# ------------------------------------------------------------------ baselines

@pytest.fixture
def baseline_file(graph_breaks, work) -> Path:
    path = work / "ci" / "cagtool-baseline.json"
    proc = cagtool("baseline", "save", graph_breaks, "-o", path, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert f"baseline saved: {path}" in proc.stdout
    return path


def test_baseline_round_trip(graph_breaks, baseline_file, work):
    baseline = load_baseline(baseline_file)
    run = load_run(graph_breaks)
    assert set(baseline.modes) == {"aot", "ca"}
    for name, record in run.modes.items():
        metrics, saved = mode_metrics(record), baseline.modes[name]
        assert (saved.ca_graphs, saved.recompiles, saved.graph_breaks, saved.steps) == (
            metrics.ca_graphs, metrics.recompiles, metrics.graph_breaks, metrics.steps
        )
        assert saved.step_time.median_s == pytest.approx(metrics.step_time.median_s, rel=1e-5)
        assert saved.compile_time_s == pytest.approx(metrics.compile_time_s, rel=1e-5)
    assert baseline.versions["torch"] == run.meta.versions["torch"]
    assert json.loads(baseline_file.read_text())["version"] == 1
    show = cagtool("baseline", "show", baseline_file, cwd=work)
    assert show.returncode == 0 and "ca: finished" in show.stdout
    # The run against its own baseline: every count equal, no time change; one process a side, so
    # the run-to-run noise is assumed and only a threshold beyond it can pass (at 10%: exit 5).
    gate_json(graph_breaks, "--baseline", baseline_file, "--max-regression", "10%", cwd=work, code=5)
    data = gate_json(graph_breaks, "--baseline", baseline_file, "--max-regression", "200%", "--max-compile-regression", "100%", cwd=work, code=0,
                     load_may_decide=True)
    assert outcomes(data) == {
        "mode-finished": "pass", "max-ca-graphs": "pass", "max-recompiles:ca": "pass", "max-recompiles:dynamo": "pass",
        "max-graph-breaks": "pass", "max-regression": "pass", "max-compile-regression": "pass",
    }
    assert [c["source"] for c in data["checks"]][1:5] == ["baseline"] * 4
    assert data["warnings"] == []


def test_baseline_show_prints_the_figure_the_gate_compares_with(graph_breaks, baseline_file, work):
    """`baseline show` printed each mode's median of all steps pooled, a figure no check compares
    with; the gate compares the median of each process's figure, in CPU time where the steps were
    CPU-bound. show prints that figure, labelled, beside the pooled one (which it names so), and it
    is the `vs baseline` figure of the gate against the same file, mode by mode."""
    from cagtool.report.figures.intervals import MEASURE_WORDS
    from cagtool.report.gate.checks import _fmt_s

    show = cagtool("baseline", "show", baseline_file, cwd=work)
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    for mode in ("aot", "ca"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {mode}: finished"))
        assert " steady steps pooled: median " in lines[at]
        proc = cagtool("gate", "--format", "json", graph_breaks, "--mode", mode, "--baseline", baseline_file, "--max-regression", "1000%",
                       "--no-config", cwd=work)
        assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: a load that may have decided it (gate_json)
        check = next(c for c in json.loads(proc.stdout)["checks"] if c["check"] == "max-regression")
        measure, figure = check["data"]["measure"], _fmt_s(check["data"]["baseline_s"])
        assert lines[at + 1].startswith(
            f"    gate --max-regression compares against: {MEASURE_WORDS[measure]} median {figure} (1 process's median"), (lines[at + 1], check)
        assert f"vs baseline {figure}" in check["message"]


def _set_step_time(seconds: float):
    def change(data: dict) -> None:
        step = data["modes"]["ca"]["step_time"]
        for key in ("median_s", "p10_s", "p90_s", "mean_s"):
            step[key] = seconds
        # What the intervals read: every statistic, over all steps and per batch, at `seconds`.
        sample = step["sample"]
        sample["values_s"] = {name: seconds for name in sample["values_s"]}
        sample["units_s"] = {name: [seconds] * len(units) for name, units in sample["units_s"].items()}
        sample["cpu_bound"] = False  # judged on the wall times set here
    return change


def test_step_time_regression_pass_fail_improve(graph_breaks, work):
    """Deterministic on a loaded machine: the run's steady step times are a fixed series
    (machine_free_copy), and the baseline's are set from the run's own p10/p90 (the baseline was
    saved from it), so the whole interval of the ratio is beyond the threshold."""
    run = machine_free_copy(graph_breaks, work / "steady")
    baseline_file = work / "baseline.json"
    assert cagtool("baseline", "save", run, "-o", baseline_file, cwd=work).returncode == 0
    args = (run, "--baseline", baseline_file, "--max-regression", "10%")
    step = json.loads(baseline_file.read_text())["modes"]["ca"]["step_time"]
    assert step["count"] >= 5
    edit(baseline_file, _set_step_time(step["p10_s"] / 4))  # the baseline was 4x faster than this run's p10
    failed = gate_json(*args, cwd=work, code=1)
    check = [c for c in failed["checks"] if c["check"] == "max-regression"][0]
    assert check["outcome"] == "fail" and check["data"]["change_pct"] > 100, check["message"]
    assert check["data"]["low"] > 1.1 and "> +10% (90% CI" in check["message"]
    edit(baseline_file, _set_step_time(step["p90_s"] * 4))  # now 4x slower than this run's p90
    improved = gate_json(*args, cwd=work, code=0)
    assert outcomes(improved)["max-regression"] == "improved"
    gate_json(*args, "--fail-on-improvement", cwd=work, code=1)
    gate_json(run, "--baseline", baseline_file, "--max-regression", "p90:1000%", cwd=work, code=0)


def test_compile_time_regression_pass_and_fail(graph_breaks, baseline_file, work):
    args = (graph_breaks, "--baseline", baseline_file, "--max-compile-regression")
    # One compile time a side: the noise is assumed; 25% cannot be told, 100% can.
    assert outcomes(gate_json(*args, "25%", cwd=work, code=5))["max-compile-regression"] == "inconclusive"
    assert outcomes(gate_json(*args, "100%", cwd=work, code=0, load_may_decide=True))["max-compile-regression"] == "pass"
    edit(baseline_file, lambda d: d["modes"]["ca"].update(compile_time_s=d["modes"]["ca"]["compile_time_s"] / 4))
    assert outcomes(gate_json(*args, "25%", cwd=work, code=1, load_may_decide=True))["max-compile-regression"] == "fail"
    assert outcomes(gate_json(*args, "1000s", cwd=work, code=0))["max-compile-regression"] == "pass"


def test_baseline_counts_are_direction_aware(graph_breaks, baseline_file, work):
    edit(baseline_file, lambda d: d["modes"]["ca"].update(graph_breaks=d["modes"]["ca"]["graph_breaks"] + 1))
    data = gate_json(graph_breaks, "--baseline", baseline_file, cwd=work, code=0)
    assert outcomes(data)["max-graph-breaks"] == "improved"
    edit(baseline_file, lambda d: d["modes"]["ca"].update(graph_breaks=0))
    data = gate_json(graph_breaks, "--baseline", baseline_file, cwd=work, code=1)
    assert outcomes(data)["max-graph-breaks"] == "fail"


def test_environment_mismatch_warns(graph_breaks, baseline_file, work):
    def change(data: dict) -> None:
        data["versions"]["torch"] = "2.12.0"
        data["machine"]["cpu_count"] = 512
        data["machine"]["hostname"] = "another-runner"  # differs between CI runners: no warning
    edit(baseline_file, change)
    data = gate_json(graph_breaks, "--baseline", baseline_file, cwd=work, code=0)
    assert len(data["warnings"]) == 2
    assert data["warnings"][0].startswith("torch version differs: baseline 2.12.0, this run ")
    assert "cpu_count 512 ->" in data["warnings"][1] and "hostname" not in data["warnings"][1]
    text = cagtool("gate", graph_breaks, "--baseline", baseline_file, cwd=work)
    assert text.returncode == 0 and "warning: torch version differs" in text.stdout


@pytest.mark.parametrize("content, message", [
    (None, "baseline not found"),
    ("{garbage", "is not valid JSON"),
    ('{"format": "cagtool-run", "schema_version": 1}', "is not a cagtool baseline"),
])
def test_missing_or_corrupt_baseline_is_exit_3(op_loop, work, content, message):
    path = work / "b.json"
    if content is not None:
        path.write_text(content)
    proc = cagtool("gate", op_loop, "--baseline", path, "--max-ca-graphs", "9", cwd=work)
    assert proc.returncode == 3
    assert message in proc.stderr and proc.stdout == ""


# ------------------------------------------------------------------ CI outputs

def test_junit_parsed_back(op_loop, work):
    junit = work / "reports" / "gate.xml"
    data = gate_json(op_loop, "--max-ca-graphs", "1", "--max-recompiles", "99", "--junit", junit, cwd=work, code=1)
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [c["check"] for c in data["checks"]]
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == "1" and suite.get("errors") == "0"
    failed = [c for c in cases if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["max-ca-graphs"]
    assert failed[0].get("classname") == "cagtool.gate.ca"
    assert "> 1 allowed" in failed[0].find("failure").get("message")
    assert "improved" in cases[-1].find("system-out").text


def test_github_annotations_and_step_summary(op_loop, work):
    summary = work / "summary.md"
    summary.write_text("# earlier step\n\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    proc = cagtool("gate", op_loop, "--max-ca-graphs", "1", "--max-graph-breaks", "9", cwd=work, env=env)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(line.startswith("::error title=cagtool gate%3A max-ca-graphs (ca)::max-ca-graphs (ca): CA graphs") for line in lines)
    assert any(line.startswith("::warning title=cagtool gate%3A max-graph-breaks (ca)::") for line in lines)
    text = summary.read_text()
    assert text.startswith("# earlier step\n\n### cagtool gate: ❌ failed\n")
    assert "| ❌ | `max-ca-graphs` | ca |" in text and "| ✅ | `mode-finished` | ca |" in text
    # JSON keeps stdout parseable: the annotations go to stderr, where the runner reads them too.
    proc = cagtool("gate", op_loop, "--max-ca-graphs", "1", "--format", "json", cwd=work, env=env)
    assert json.loads(proc.stdout)["passed"] is False
    assert "::error title=cagtool gate%3A max-ca-graphs (ca)::" in proc.stderr
    assert summary.read_text().count("### cagtool gate:") == 2


def test_no_annotations_outside_github(op_loop, work):
    proc = cagtool("gate", op_loop, "--max-ca-graphs", "1", cwd=work)
    assert "::error" not in proc.stdout + proc.stderr


# ------------------------------------------------------------------ config and usage

def test_pyproject_config_and_flags_win(op_loop, work):
    actual = mode_metrics(load_run(op_loop).mode("ca")).ca_graphs
    (work / "pyproject.toml").write_text(
        f'[project]\nname = "demo"\n\n[tool.cagtool.gate]\nmax-ca-graphs = {actual - 1}\nmax-recompiles = {{ dynamo = 0 }}\n'
    )
    sub = work / "src" / "pkg"
    sub.mkdir(parents=True)
    data = gate_json(op_loop, cwd=sub, code=1)
    assert data["config"] == str((work / "pyproject.toml").resolve())
    assert outcomes(data)["max-ca-graphs"] == "fail" and outcomes(data)["max-recompiles:dynamo"] == "pass"
    assert [c["source"] for c in data["checks"] if c["check"] == "max-ca-graphs"] == [str((work / "pyproject.toml").resolve())]
    flagged = gate_json(op_loop, "--max-ca-graphs", str(actual), cwd=sub, code=0)
    assert [c["source"] for c in flagged["checks"] if c["check"] == "max-ca-graphs"] == ["flag"]
    assert cagtool("gate", op_loop, "--no-config", cwd=sub).returncode == 2


def test_config_baseline_path_is_relative_to_pyproject(graph_breaks, baseline_file, work):
    (work / "pyproject.toml").write_text('[tool.cagtool.gate]\nbaseline = "ci/cagtool-baseline.json"\nmax-regression = "200%"\n')
    sub = work / "deeper"
    sub.mkdir()
    data = gate_json(graph_breaks, cwd=sub, code=0, load_may_decide=True)
    assert Path(data["baseline"]).resolve() == baseline_file.resolve()
    assert outcomes(data)["max-regression"] == "pass"


@pytest.mark.parametrize("args, message", [
    ((), "no gate thresholds"),
    (("--max-ca-graphs", "many"), "--max-ca-graphs: expected a whole number"),
    (("--max-recompiles", "aot:1"), "unknown kind 'aot'"),
    (("--min-speedup", "fast"), "--min-speedup"),
    (("--max-regression", "10%"), "--max-regression compares against a baseline"),
    (("--mode", "gpu", "--max-ca-graphs", "1"), "--mode: expected one of"),
])
def test_usage_errors_are_exit_2(op_loop, work, args, message):
    proc = cagtool("gate", op_loop, *args, cwd=work)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr


def test_unreadable_run_is_exit_3(work):
    garbage = work / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("not json")
    for target in (garbage, work / "missing"):
        proc = cagtool("gate", target, "--max-ca-graphs", "1", cwd=work)
        assert proc.returncode == 3, proc.stderr
        assert proc.stderr.startswith("cagtool: error:")
    proc = cagtool("baseline", "save", work / "missing", "-o", work / "b.json", cwd=work)
    assert proc.returncode == 3 and not (work / "b.json").exists()


def test_failed_mode_fails_the_gate_and_is_not_a_baseline(op_loop, work):
    broken = work / "broken-run"
    shutil.copytree(op_loop, broken)
    edit(broken / "ca" / "manifest.json", lambda d: d.update(status="failed", exit_code=1))
    data = gate_json(broken, "--max-ca-graphs", "99", cwd=work, code=1)
    assert outcomes(data)["mode-finished"] == "fail"
    proc = cagtool("baseline", "save", broken, "-o", work / "b.json", cwd=work)
    assert proc.returncode == 2 and "--allow-failed" in proc.stderr
    assert cagtool("baseline", "save", broken, "-o", work / "b.json", "--allow-failed", cwd=work).returncode == 0


# ------------------------------------------------------------------ the flags `cagtool run --gate` shares

def test_with_gate_options_adds_the_flags_to_another_command(op_loop, work, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from cagtool.commands.gate import gate_and_report, with_gate_options
    from cagtool.report.gate.run import GateOptions

    app = typer.Typer()
    seen: list[GateOptions] = []

    @app.command()
    @with_gate_options()
    def run(script: str, gate: bool = typer.Option(False, "--gate"), *, gate_options: GateOptions) -> None:
        seen.append(gate_options)
        if gate:
            raise typer.Exit(gate_and_report(op_loop, gate_options))

    @app.command()
    def other() -> None:  # a second command keeps typer from collapsing the app into `run`
        pass

    monkeypatch.chdir(work)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["run", "train.py", "--gate", "--max-ca-graphs", "1", "--max-recompiles", "ca:9", "--junit", str(work / "g.xml")])
    assert result.exit_code == 1, result.output
    options = seen[-1]
    assert options.settings.max_ca_graphs.limit == 1 and options.settings.max_recompiles["ca"].limit == 9
    assert options.junit == work / "g.xml" and (work / "g.xml").exists()
    assert "gate FAILED" in result.output
    assert runner.invoke(app, ["run", "train.py"]).exit_code == 0
    assert not seen[-1].settings.has_thresholds()
    bad = runner.invoke(app, ["run", "train.py", "--max-ca-graphs", "lots"])
    assert bad.exit_code != 0 and len(seen) == 2  # parsed before the command body runs


# A gate check's Source names what set the limit in force: a flag that replaces a pyproject.toml
# limit is the flag, and a flag beside the config's other keys leaves those keys the config's.
def _sources(data: dict) -> dict[str, str]:
    return {c["check"]: c["source"] for c in data["checks"] if c["check"].startswith("max-")}


def test_a_flag_over_a_config_limit_is_the_checks_source(op_loop, work):
    recompiles = mode_metrics(load_run(op_loop).mode("ca")).recompiles
    config = work / "pyproject.toml"
    config.write_text("[tool.cagtool.gate]\nmax-recompiles = 0\nmax-ca-graphs = 100\n")
    assert _sources(gate_json(op_loop, cwd=work, code=1)) == {"max-recompiles": str(config.resolve()), "max-ca-graphs": str(config.resolve())}
    flagged = gate_json(op_loop, "--max-recompiles", str(recompiles), cwd=work, code=0)
    assert _sources(flagged) == {"max-recompiles": "flag", "max-ca-graphs": str(config.resolve())}


def test_a_flag_beside_other_config_keys_leaves_them_the_configs(op_loop, work):
    config = work / "pyproject.toml"
    config.write_text('[tool.cagtool.gate]\nmax-recompiles = { dynamo = 0, ca = 0 }\n')
    data = gate_json(op_loop, "--max-recompiles", "ca:100", cwd=work, code=0)
    assert _sources(data) == {"max-recompiles:ca": "flag", "max-recompiles:dynamo": str(config.resolve())}


def test_a_run_still_being_recorded_is_refused_not_failed_for_its_modes_to_come(op_loop, work):
    """`cagtool gate` of a run whose `cagtool run --repeat` was still going failed "mode-finished:
    ca.2: missing: no record was written (the process died before starting the target)" of
    repetitions not started yet, and judged its timing checks on the finished ones. A run whose
    cagtool process is alive is refused, exit 3, with one line that says why."""
    from cagtool.record.liveness import this_process

    copy = work / "in_progress"
    shutil.copytree(op_loop, copy)
    edit(copy / "run.json", lambda data: data.update(status="running", process=this_process()))
    proc = cagtool("gate", str(copy), "--max-ca-graphs", "10", cwd=work)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "is still being recorded" in proc.stderr and "Traceback" not in proc.stderr and "FAIL" not in proc.stdout


def test_a_mode_record_still_being_written_is_not_said_to_have_been_killed(op_loop, work):
    """A mode whose record is still "running" with its writer alive (the loader reads one whose
    process is gone from this host as killed) read "the record was never finished: the process was
    killed": it is said to be not finished, the process still running or killed out of sight."""
    from cagtool.record.liveness import this_process

    copy = work / "mode_running"
    shutil.copytree(op_loop, copy)
    edit(copy / "ca" / "manifest.json", lambda data: data.update(status="running", process={**data.get("process", {}), **this_process()}))
    proc = cagtool("gate", str(copy), "--max-ca-graphs", "10", cwd=work)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 1 and "its record is not finished: the process is still running" in said, said
    assert "was killed" not in said.replace("it was killed on a host", "")
