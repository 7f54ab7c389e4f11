"""`recompiles --verify` on a DDP job (gloo, 2 ranks by mp.spawn, CPU): every re-run records both
ranks, and the counts before and after are rank 0's (the launcher trains nothing). The job's last
batch is smaller, so each rank's compiled autograd recompiles once for the changed sizes. The job
(tests/scripts/ddp_unsynced_ragged.py, recorded in eager and ca) is the one the DDP
gradient-parity test reads too (conftest's `ddp_unsynced_ragged`, recorded once per session); the
fixes are verified in its ca mode.

ca-dynamic removes that CA recompile, but torch 2.13 then recompiles the CA graph's code in Dynamo
instead (`tensor 'sizes[1]' size mismatch at index 1. expected 8, actual 4`): one recompile
traded for another, so the verdict is "no effect", with the exact counts. (The DDP fix the
Python reducer would be is not a --verify fix: cagtool's ca mode already selects it, and without it
compiled autograd raises rather than recompiles; docs/torch-internals.md.) ~4 minutes on 2 cores."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cagtool_in_process
from cagtool.record.loader import load_run

pytestmark = pytest.mark.slow


def test_a_ddp_jobs_fix_is_measured_on_rank_0_with_exact_counts(ddp_unsynced_ragged, tmp_path):
    recorded = ddp_unsynced_ragged
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "ddp"))  # the verification writes into the run
    # In-process: the re-runs are `cagtool run` processes all the same; only the command that
    # starts them and reads their records saves a new interpreter.
    proc = cagtool_in_process("recompiles", str(run), "--explain", "--verify", "--repeat", "1", "--format", "json", env={"CI": "true"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = json.loads(proc.stdout)["verification"]
    [fix] = v["fixes"]
    assert fix["fix"] == "ca-dynamic"
    base, after = v["baseline"], fix["measured"]
    assert (base["ca_recompiles"], base["dynamo_recompiles"], base["ca_graphs"]) == ([1], [0], [2])
    assert (after["ca_recompiles"], after["dynamo_recompiles"], after["ca_graphs"]) == ([0], [1], [1])
    assert fix["verdict"] == "no effect" and fix["numerics_agree"] is True, fix["reasons"]
    # Its ranks were started afresh (mp.spawn): they import the script again, so a patched copy
    # would not be what they run (code patches are refused for such a job); a fork would run it.
    from cagtool.verify.patch import reimports_script

    assert reimports_script(load_run(run).modes["ca"])
    # Both ranks were recorded in each re-run.
    for side in (base, after):
        assert sorted(p.name for p in (Path(side["run"]) / "ca" / "procs").iterdir()) == ["rank0", "rank1"]
