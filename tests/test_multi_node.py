"""A job whose ranks run on two hosts, simulated on one machine: two torchrun launchers (node ranks
0 and 1, one rank each) meeting over a localhost rendezvous, each under its own `cagtool run`
writing its own node's run, then `cagtool merge` making one run of the job. The reports and the
gate then see every rank of both nodes: the rank table, the CA graphs parting on the other node's
rank, and a gate held per rank that fails on the divergence."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process, recorded_once

pytestmark = pytest.mark.slow

SCRIPT = ROOT / "tests" / "scripts" / "ddp_env_ranks.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cagtool(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """merge, summary and gate read records and write files: in-process (cagtool_in_process)."""
    return cagtool_in_process(*args, cwd=cwd, env={"CI": "true"})


def _record_two_nodes(base: Path) -> None:
    port = _free_port()
    env = {**os.environ, "CI": "true"}
    nodes = []
    for node in (0, 1):
        cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(base / f"node{node}"),
                          "torchrun", "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                          "--master-addr", "127.0.0.1", "--master-port", str(port), str(SCRIPT), "--steps", "4", "--diverge-rank", "1")
        nodes.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(base), env=env))
    outputs = [proc.communicate(timeout=300) for proc in nodes]
    for proc, (_out, err) in zip(nodes, outputs):
        assert proc.returncode == 0, err[-3000:]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory) -> tuple[Path, Path]:
    """Both nodes' runs of one job where the rank on node 1 runs an extra op at step 2 (recorded
    once for all xdist workers, each with its own copy)."""
    base, _ = recorded_once(tmp_path_factory, "two-nodes", _record_two_nodes)
    return base / "node0", base / "node1"


def test_two_nodes_merge_into_one_job_that_reports_and_gates_every_rank(two_nodes, tmp_path):
    node0, node1 = two_nodes
    merged = tmp_path / "job"
    proc = _cagtool("merge", node1, node0, "-o", merged, cwd=tmp_path)  # any order: node 0 leads
    assert proc.returncode == 0, proc.stderr
    assert "node 0: " in proc.stderr and "ranks 0" in proc.stderr and "mode ca: ranks 0, 1" in proc.stderr
    meta = json.loads((merged / "run.json").read_text())
    assert [n["ranks"] for n in meta["options"]["merged_from"]] == [[0], [1]]
    assert not (merged / "gate.json").exists()

    summary = json.loads(_cagtool("summary", merged, "--format", "json", cwd=tmp_path).stdout)
    ranks = summary["modes"]["ca"]["ranks"]
    assert [r["rank"] for r in ranks["ranks"]] == [0, 1] and ranks["world_size"] == 2 and ranks["missing_ranks"] == []
    assert [r["ca_graphs"] for r in ranks["ranks"]] == [1, 2]  # rank 1 (node 1) captured again at step 2
    assert ranks["diverge"] is True
    findings = json.dumps(ranks["findings"])
    assert "ranks 0 and 1 part at step 2" in findings and "TanhBackward0" in findings

    gate = _cagtool("gate", merged, "--max-recompiles", "ca:5", "--format", "json", cwd=tmp_path)
    assert gate.returncode == 1
    checks = json.loads(gate.stdout)["checks"]
    assert {c["mode"] for c in checks if c["check"] == "max-recompiles:ca"} == {"ca@rank0", "ca@rank1"}
    assert next(c for c in checks if c["check"] == "ranks-agree")["outcome"] == "fail"
    assert next(c for c in checks if c["check"] == "ranks-present")["outcome"] == "pass"

    # One node alone is half a job: its gate says a rank is missing.
    half = json.loads(_cagtool("gate", node1, "--max-recompiles", "ca:5", "--format", "json", cwd=tmp_path).stdout)
    assert next(c for c in half["checks"] if c["check"] == "ranks-present")["outcome"] == "fail"


def test_merge_refuses_what_is_not_one_job(two_nodes, tmp_path):
    node0, node1 = two_nodes
    same = _cagtool("merge", node0, node0, "-o", tmp_path / "x", cwd=tmp_path)
    assert same.returncode == 2 and "given twice" in same.stderr
    (tmp_path / "exists").mkdir()
    exists = _cagtool("merge", node0, node1, "-o", tmp_path / "exists", cwd=tmp_path)
    assert exists.returncode == 2 and "already exists" in exists.stderr
    one = _cagtool("merge", node0, "-o", tmp_path / "y", cwd=tmp_path)
    assert one.returncode == 2 and "at least two" in one.stderr
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "run.json").write_text("{not json")
    unreadable = _cagtool("merge", node0, garbage, "-o", tmp_path / "z", cwd=tmp_path)
    assert unreadable.returncode == 3
    assert not any((tmp_path / name).exists() for name in ("x", "y", "z"))
