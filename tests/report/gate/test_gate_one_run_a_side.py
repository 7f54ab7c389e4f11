"""The gate as CI runs it: one run a side, on a real torch job, as `baseline save` from one run
suggests.

Records (one process each, made once per session):
    cagtool run --modes aot --backend eager sample_scripts/mlp_steps.py --steps 60 [--slow-ms N]
for N = 0 (the baseline), 0 again (an unchanged re-run), 50 (about 13x slower on the idle 2-core
VM: ~4 ms steps) and 10 (about 3x), with one intra-op thread (OMP_NUM_THREADS=1). With one process a side the run-to-run noise is not measured,
so the gate assumes it (report.figures.intervals.ASSUMED_NOISE): the slowed jobs fail a 5%
threshold, and the unchanged re-run is INCONCLUSIVE (exit 5), never a PASS the evidence cannot
support, and never a FAIL. What the outputs say holds no figure beyond what a process can show.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, cagtool_cmd, recorded_once

from gate_cli import cagtool

pytestmark = pytest.mark.slow

JOBS = {"baseline": 0, "unchanged": 0, "slow50": 50, "slow10": 10}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, inductor_cache) -> dict[str, Path]:
    import os
    import subprocess

    def record(where: Path) -> dict[str, Any]:
        # One intra-op thread, as the CI recipe pins it: beside the suite's other worker, a thread
        # that waits at a parallel region for a descheduled sibling spins, and steps of the same
        # job then differ by 10x and more (benchmarks/README.md).
        env = {**os.environ, "CI": "true", "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), "OMP_NUM_THREADS": "1"}

        def job(name: str) -> int:
            shutil.rmtree(where / name, ignore_errors=True)
            cmd = cagtool_cmd("run", "--modes", "aot", "--backend", "eager", "--no-report", "-o", str(where / name),
                              str(ROOT / "sample_scripts" / "mlp_steps.py"), "--steps", "60", "--slow-ms", str(JOBS[name]))
            return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(ROOT)).returncode

        codes = {name: job(name) for name in JOBS}
        pairs = []
        # The premise of the unchanged re-run's test: one job twice on one machine. A CI runner whose
        # other work doubled every step's CPU time for a whole run (seen: 4.4 ms a step in the
        # baseline, 8.8 ms in the re-run after it) breaks it: the pair is recorded again, up to
        # STEADY_TRIES times. (The slowed jobs are not compared so: after each wait a step starts
        # with cold caches, and costs more CPU, 1.3-1.8x measured.)
        for attempt in range(STEADY_TRIES):
            if codes["baseline"] or codes["unchanged"]:
                break
            pair = (_median_cpu_ms(where / "baseline"), _median_cpu_ms(where / "unchanged"))
            pairs.append(pair)
            if max(pair) <= STEADY_RATIO * min(pair) or attempt == STEADY_TRIES - 1:
                break
            codes["baseline"], codes["unchanged"] = job("baseline"), job("unchanged")
        return {"codes": codes, "cpu_ms": pairs}

    path, value = recorded_once(tmp_path_factory, "mlp_steps_one_run_a_side", record)
    assert all(code == 0 for code in value["codes"].values()), value
    pair = value["cpu_ms"][-1]
    assert max(pair) <= STEADY_RATIO * min(pair), (
        f"the machine's speed moved by more than {STEADY_RATIO}x between the baseline and its re-run in each of {STEADY_TRIES} "
        f"tries (median CPU ms a step: {value['cpu_ms']}): too busy a runner for a test of one process a side")
    return {name: path / name for name in JOBS}


# The baseline and its unchanged re-run's median CPU time a step may differ by this much (the assumed
# run-to-run noise in CPU time is +/-79 %); beyond it the two are recorded again, up to STEADY_TRIES times.
STEADY_RATIO = 1.5
STEADY_TRIES = 3


def _median_cpu_ms(run: Path) -> float:
    from cagtool.record.loader import load_run
    from cagtool.record.schema import StepEvent

    cpu = sorted(s.cpu_s for s in load_run(run).mode("aot").of(StepEvent) if s.cpu_s is not None and not s.compiles)
    return 1000 * cpu[len(cpu) // 2]


@pytest.fixture(scope="module")
def baseline(runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("baseline") / "cagtool-baseline.json"
    proc = cagtool("baseline", "save", str(runs["baseline"]), "-o", str(out), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return out


def _gate(run: Path, baseline: Path, tmp: Path, *extra: str) -> tuple[int, dict, ET.Element]:
    junit = tmp / f"{run.name}.xml"
    proc = cagtool("gate", str(run), "--baseline", str(baseline), "--mode", "aot", "--max-regression", "5%",
                   "--format", "json", "--junit", str(junit), *extra, cwd=ROOT)
    return proc.returncode, json.loads(proc.stdout), ET.parse(junit).getroot()


def _regression(data: dict) -> dict:
    return next(c for c in data["checks"] if c["check"] == "max-regression")


def _told(check: dict) -> str:
    """The whole check, for an assertion's message: a CI log shows why it failed."""
    return json.dumps(check, indent=1)


def _runner_warned(check: dict) -> bool:
    """Whether the gate warned that the runner, not the code, may have decided the check: its
    load (a wait for a CPU) or its machine (the reference loop's speed, with a machine factor)."""
    machine = any(w.startswith(f"{check['check']}: machine: ") for w in check["warnings"]) and "machine_factor" in check["data"]
    return machine or any(": load: " in w for w in check["warnings"])


def test_a_job_13x_slower_fails_with_one_run_a_side(runs, baseline, tmp_path):
    code, data, junit = _gate(runs["slow50"], baseline, tmp_path)
    check = _regression(data)
    # It never passes. On a runner whose load alone could have made the difference (the gate's own
    # load warning, docs/ci.md), or one that slowed the baseline's own steps beyond 40 % of their
    # runnable time (seen in CI beside three other jobs on 2 cores: 45.3 ms a step against ~4, the
    # slowed job 72.2 ms), or whose CPU ran the reference loop slower in one run than in the other
    # by enough to turn the verdict (the gate's machine warning: seen in CI), the honest outcome is
    # INCONCLUSIVE (exit 5), with the warning that says why; without any, a FAIL.
    loaded_baseline = any("load: the baseline's median step waited for a CPU" in w for w in check["warnings"])
    if check["outcome"] == "inconclusive" and (check["data"].get("load_decided") == "above" or loaded_baseline):
        assert code == 5 and _runner_warned(check), _told(check)
        return
    assert code == 1 and check["outcome"] == "fail", _told(check)
    assert check["data"]["measure"] == "wall"  # the wait is off the CPU: only wall time sees it
    assert check["data"]["noise_measured"] is False
    assert any("run-to-run noise not measured, assumed" in n for n in check["notes"])
    assert junit.find(".//failure[@type='regression']") is not None


def test_a_job_3x_slower_never_passes_with_one_run_a_side(runs, baseline, tmp_path):
    """+10 ms on a ~4 ms step: 3.5x on an idle machine, which fails. A busy CI runner that slowed
    the baseline's own steps 1.5x leaves ~2.7x, inside the assumed run-to-run noise of one process a
    side: then the outcome is INCONCLUSIVE, saying the machine is too noisy, and never a PASS
    (benchmarks/README.md has how often each happens, quiet and busy)."""
    code, data, junit = _gate(runs["slow10"], baseline, tmp_path)
    check = _regression(data)
    ratio = check["data"]["ratio"]
    if check["data"].get("load_decided") == "above":
        # Slower on its figures, and this run's load alone could explain it (docs/ci.md): INCONCLUSIVE
        # with the gate's load warning, never a pass (seen in CI: 19.5 against 5.3 ms a step).
        assert code == 5 and check["outcome"] == "inconclusive" and _runner_warned(check), _told(check)
    elif ratio >= 3.0:
        assert code == 1 and check["outcome"] == "fail", _told(check)
        assert junit.find(".//failure[@type='regression']") is not None
    else:
        assert check["outcome"] in ("fail", "inconclusive") and code in (1, 5), _told(check)
    # How much slower it reads depends on the runner: the busier it is, the more the baseline's
    # own steps are slowed too (1.50x seen beside two other test workers on 2 cores; once, its
    # median step waiting for a CPU 67% of its runnable time, 2.2x: the slowed job read 0.92x).
    # What holds on any runner: it never passes; it reads slower unless the gate itself says the
    # baseline's load was beyond 40 % of its runnable time (then the ratio is the machine's).
    assert check["outcome"] != "pass"
    loaded = any("load: the baseline's median step waited for a CPU" in w for w in check["warnings"])
    assert ratio > 1.0 or (loaded and check["outcome"] == "inconclusive"), (ratio, check["warnings"])


def test_an_unchanged_rerun_is_inconclusive_not_a_pass(runs, baseline, tmp_path):
    # The baseline keeps the wait where its compile ran, beside its steady steps' (docs/ci.md).
    saved = json.loads(baseline.read_text())["modes"]["aot"]
    assert 0.0 <= saved["compile_cpu_wait"] <= 1.0 and 0.0 <= saved["step_time"]["cpu_wait"] <= 1.0
    code, data, junit = _gate(runs["unchanged"], baseline, tmp_path)
    check = _regression(data)
    assert check["outcome"] == "inconclusive" and code == 5, _told(check)
    assert data["inconclusive"] is True and data["passed"] is False
    assert any("wider than the +5% threshold" in n for n in check["notes"])
    assert junit.find(".//skipped[@type='inconclusive']") is not None and junit.find(".//failure") is None
    # --require-power: a CI that wants every check decided fails it instead.
    code, data, _ = _gate(runs["unchanged"], baseline, tmp_path, "--require-power")
    assert code == 1 and _regression(data)["outcome"] == "error"


def test_no_output_carries_a_figure_beyond_what_a_process_can_show(runs, baseline, tmp_path):
    """No exponent, no infinity, no 0.00x, no zero-width interval, no step counts in the billions,
    in the gate's text and JSON, compare's text and JSON, and the summary."""
    texts = []
    for job in JOBS:
        proc = cagtool("gate", str(runs[job]), "--baseline", str(baseline), "--mode", "aot", "--max-regression", "5%", cwd=ROOT)
        texts.append(proc.stdout)
        texts.append(cagtool("gate", str(runs[job]), "--baseline", str(baseline), "--mode", "aot", "--max-regression", "5%", "--format", "json", cwd=ROOT).stdout)
    texts.append(cagtool("compare", str(runs["baseline"]), str(runs["slow50"]), cwd=ROOT).stdout)
    texts.append(cagtool("compare", str(runs["baseline"]), str(runs["slow50"]), "--format", "json", cwd=ROOT).stdout)
    texts.append(cagtool("summary", str(runs["slow50"]), cwd=ROOT).stdout)
    for text in texts:
        assert text.strip()
        assert not re.search(r"\d[eE]\+?\d{2,}", text), text  # 1.6e+164, 5.3e+09 (a tiny figure, 6e-05 s, is fine)
        assert "inf" not in text.replace("info", "").lower().replace("inference", ""), text
        assert "0.00x" not in text and "unbounded" not in text
        assert not re.search(r"\d{1,3}(,\d{3}){2,} steady steps", text)
    for job in JOBS:
        data = json.loads(cagtool("gate", str(runs[job]), "--baseline", str(baseline), "--mode", "aot", "--max-regression", "5%",
                                  "--format", "json", cwd=ROOT).stdout)
        check = _regression(data)["data"]
        assert check["high"] > check["low"]  # never a zero-width interval
