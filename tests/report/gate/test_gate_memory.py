"""Peak memory in the gate: `--max-memory-ratio`, its grammar, CUDA before RSS,
against another mode or the baseline, and the CLI on a real run."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from conftest import cagtool_in_process

from cagtool.errors import UsageError
from cagtool.report.gate.baseline import ModeSnapshot, baseline_from_run, load_baseline, save_baseline
from cagtool.report.gate.checks import MaxMemoryRatioCheck, Outcome
from cagtool.report.gate.config import settings_from_values
from cagtool.report.gate.run import build_checks
from cagtool.report.gate.checks import MemoryRatioThreshold, parse_memory_ratio
from cagtool.record.loader import load_run

MIB = 2**20


def snap(mode: str, rss: int | None = None, cuda: int | None = None) -> ModeSnapshot:
    return ModeSnapshot(mode=mode, status="finished", steps=5, ca_graphs=1, ca_cache_misses=0, dynamo_recompiles=0,
                        recompiles=0, graph_breaks=0, forward_graphs=1, backward_graphs=1, compile_time_s=1.0,
                        peak_rss_bytes=rss, peak_device_memory_bytes=cuda)


@pytest.mark.parametrize("text, expected", [
    ("1.2", MemoryRatioThreshold("ca", "aot", 1.2)),
    ("1.5x", MemoryRatioThreshold("ca", "aot", 1.5)),
    ("ca/eager:2", MemoryRatioThreshold("ca", "eager", 2.0)),
    ("baseline:1.1", MemoryRatioThreshold("", "baseline", 1.1)),
])
def test_parse_memory_ratio(text, expected):
    assert parse_memory_ratio(text) == expected


@pytest.mark.parametrize("text", ["0", "-1", "ca/ca:1", "gpu:1", "x", "ca/aot:"])
def test_parse_memory_ratio_rejects(text):
    with pytest.raises(UsageError, match="--max-memory-ratio"):
        parse_memory_ratio(text)


def test_ratio_of_two_modes_pass_and_fail():
    run = {"ca": snap("ca", rss=300 * MIB), "aot": snap("aot", rss=250 * MIB)}
    passed = MaxMemoryRatioCheck(MemoryRatioThreshold("ca", "aot", 1.25)).evaluate(run, None)
    assert passed.outcome is Outcome.PASS and passed.actual == "1.200x"
    failed = MaxMemoryRatioCheck(MemoryRatioThreshold("ca", "aot", 1.1)).evaluate(run, None)
    assert failed.outcome is Outcome.FAIL and failed.failed
    assert failed.message == "max-memory-ratio (ca/aot): peak RSS 300 MiB / 250 MiB = 1.200x > 1.1x allowed"


def test_cuda_memory_is_preferred_when_both_modes_have_it():
    run = {"ca": snap("ca", rss=300 * MIB, cuda=900 * MIB), "aot": snap("aot", rss=300 * MIB, cuda=600 * MIB)}
    result = MaxMemoryRatioCheck(MemoryRatioThreshold("ca", "aot", 1.2)).evaluate(run, None)
    assert result.outcome is Outcome.FAIL and result.data["memory"] == "CUDA max allocated" and result.data["ratio"] == 1.5


def test_ratio_against_the_baseline_and_unmeasurable_cases():
    check = MaxMemoryRatioCheck(MemoryRatioThreshold("ca", "baseline", 1.1))
    result = check.evaluate({"ca": snap("ca", rss=210 * MIB)}, {"ca": snap("ca", rss=200 * MIB)})
    assert result.outcome is Outcome.PASS and result.mode == "ca/baseline"
    no_figure = check.evaluate({"ca": snap("ca", rss=210 * MIB)}, {"ca": snap("ca")})
    assert no_figure.outcome is Outcome.ERROR and no_figure.failed
    no_mode = MaxMemoryRatioCheck(MemoryRatioThreshold("ca", "aot", 1.1)).evaluate({"ca": snap("ca", rss=1)}, None)
    assert no_mode.outcome is Outcome.ERROR


def test_settings_and_checks_from_config_values():
    settings = settings_from_values({"max-memory-ratio": {"ca/aot": 1.3, "baseline": 1.1}}, "pyproject.toml")
    assert set(settings.max_memory_ratio) == {"ca/aot", "baseline"}
    with pytest.raises(UsageError, match="baseline"):
        build_checks(settings, "ca", None)
    checks = build_checks(replace(settings, max_memory_ratio={"ca/aot": settings.max_memory_ratio["ca/aot"]}), "ca", None)
    ratios = [c for c in checks if isinstance(c, MaxMemoryRatioCheck)]
    assert [c.threshold for c in ratios] == [MemoryRatioThreshold("ca", "aot", 1.3)]


def test_gate_cli_on_a_real_run_and_baseline_keeps_peaks(record_run, tmp_path):
    run = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr

    def gate(*args: str) -> subprocess.CompletedProcess:
        return cagtool_in_process("gate", str(run.path), "--no-config", "--format", "json", *args, cwd=tmp_path)

    loose = gate("--max-memory-ratio", "100")
    assert loose.returncode == 0, loose.stderr
    check = next(c for c in json.loads(loose.stdout)["checks"] if c["check"] == "max-memory-ratio")
    assert check["outcome"] == "pass" and check["data"]["memory"] == "peak RSS"
    tight = gate("--max-memory-ratio", "ca/eager:0.01")
    assert tight.returncode == 1
    baseline = save_baseline(baseline_from_run(load_run(run.path)), tmp_path / "base.json")
    assert load_baseline(baseline).modes["ca"].peak_rss_bytes == load_run(run.path).mode("ca").manifest.peak_rss_bytes
    same = gate("--baseline", str(baseline), "--max-memory-ratio", "baseline:1.0")
    assert same.returncode == 0, same.stdout
