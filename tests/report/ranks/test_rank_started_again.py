"""A script that runs two DDP jobs one after the other (pretraining, then fine-tuning: two
mp.spawn process groups, tests/scripts/ddp_two_jobs.py) starts each rank twice with the same
launcher attempt. That is no launcher restart, and the second job's processes are no less the
job's: the ranks' finding says each start and how it ended, and the gate checks every start
(`ca@rank0#2`), so the second job's recompiles fail `--max-recompiles ca:0` though the ranks'
table shows the first's. One real run, gated as it is recorded (~40 s of CPU)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from conftest import ROOT, cagtool_cmd, cagtool_in_process

pytestmark = pytest.mark.slow


def test_a_rank_started_again_by_a_second_process_group_is_told_apart_and_gated_each_time(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
    run = tmp_path / "run"
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(run), "--gate", "--max-recompiles", "ca:0",
                      "--no-config", str(ROOT / "tests" / "scripts" / "ddp_two_jobs.py"))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**env, "CI": "true", "COLUMNS": "100"}, timeout=600)
    said = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    captures = {(s["job"], s["rank"]): s["ca_captures"] for s in said}
    # torch's own count: the fine-tuning job's smaller batches are a second capture in each rank
    assert captures == {("pretrain", 0): 1, ("pretrain", 1): 1, ("finetune", 0): 2, ("finetune", 1): 2}, proc.stderr[-3000:]
    # the job finished; the gate failed on the second start of each rank only
    assert proc.returncode == 1 and "gate FAILED: 2 of 12 checks failed" in proc.stderr, proc.stderr[-3000:]
    failed = {line.split("(")[1].split(")")[0] for line in proc.stderr.splitlines() if line.startswith("FAIL: max-recompiles:ca")}
    assert failed == {"ca@rank0#2", "ca@rank1#2"}
    summary = json.loads(cagtool_in_process("summary", str(run), "--format", "json").stdout)["ranks"]
    again = {f["ranks"][0]: f for f in summary["findings"] if f["code"] == "rank_started_again"}
    assert sorted(again) == [0, 1] and not [f for f in summary["findings"] if f["code"] == "rank_restarted"]
    for rank, finding in again.items():
        starts = finding["data"]["starts"]
        assert [(s["steps"], s["status"]) for s in starts] == [(3, "finished"), (4, "finished")]
        # each start's record holds torch's own counters of its process
        for start, job in zip(starts, ("pretrain", "finetune")):
            manifest = json.loads((run / "ca" / "procs" / start["process"] / "manifest.json").read_text())
            assert manifest["torch_counters"]["compiled_autograd"]["captures"] == captures[(job, rank)]
        assert "not by a launcher's restart" in finding["message"] and "the gate checks each" in finding["message"]
    # the ranks' table shows the first job's ranks
    assert {r["rank"]: r["steps"] for r in summary["ranks"]} == {0: 3, 1: 3}
