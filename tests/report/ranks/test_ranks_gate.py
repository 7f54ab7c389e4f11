"""`gate` on multi-rank runs: thresholds per rank, and failures for a missing or failed rank, a
process not followed, and ranks that diverge."""

from __future__ import annotations

import pytest
from rank_records import Cap, Rank, multi_rank_run  # noqa: F401 - a fixture

from cagtool.errors import UnreadableInput
from cagtool.report.gate.checks import CountLimit, Outcome
from cagtool.report.gate.config import GateSettings
from cagtool.report.gate.run import GateOptions, run_gate

EXTRA = Cap(2, node="MulBackward0", call=2, ops=("MulBackward0", "MulBackward0"))
NO_RECOMPILES = GateSettings(max_recompiles={"ca": CountLimit("ca", 0)})


def _gate(path, settings: GateSettings = NO_RECOMPILES, rank: int | None = None):
    return run_gate(path, GateOptions(settings=settings, use_config=False, rank=rank))


def _outcomes(gate) -> dict[tuple[str, str], Outcome]:
    return {(r.check, r.mode): r.outcome for r in gate.results}


def test_agreeing_ranks_pass_every_check_per_rank(multi_rank_run):
    gate = _gate(multi_rank_run({0: Rank(), 1: Rank()}))
    assert gate.passed and gate.ranks == (0, 1)
    assert _outcomes(gate) == {
        ("mode-finished", "ca"): Outcome.PASS,  # the launcher
        ("mode-finished", "ca@rank0"): Outcome.PASS,
        ("max-recompiles:ca", "ca@rank0"): Outcome.PASS,
        ("mode-finished", "ca@rank1"): Outcome.PASS,
        ("max-recompiles:ca", "ca@rank1"): Outcome.PASS,
        ("ranks-present", "ca"): Outcome.PASS,
        ("processes-followed", "ca"): Outcome.PASS,
        ("ranks-agree", "ca"): Outcome.PASS,
    }


def test_thresholds_apply_per_rank_not_to_totals(multi_rank_run):
    # Two ranks with 1 CA graph each: 2 in total, but each rank is within --max-ca-graphs 1.
    gate = _gate(multi_rank_run({0: Rank(), 1: Rank()}), GateSettings(max_ca_graphs=CountLimit("total", 1)))
    assert gate.passed
    gate = _gate(multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])}, name="diverging"))
    failed = {(r.check, r.mode) for r in gate.failures}
    assert failed == {("max-recompiles:ca", "ca@rank1"), ("ranks-agree", "ca")}
    [recompiles] = [r for r in gate.failures if r.check == "max-recompiles:ca"]
    assert recompiles.message == "max-recompiles:ca (ca@rank1): CA recompiles 1 > 0 allowed (+1)" and recompiles.data["rank"] == 1


def test_missing_rank_fails(multi_rank_run):
    gate = _gate(multi_rank_run({0: Rank()}, world_size=2))
    # The launcher's mode-finished accounts for the processes it started; ranks-present names the gap.
    assert {(r.check, r.mode) for r in gate.failures} == {("mode-finished", "ca"), ("ranks-present", "ca")}
    [present] = [r for r in gate.failures if r.check == "ranks-present"]
    assert present.actual == "1/2" and "missing rank 1" in present.message


def test_failed_rank_fails_with_its_reason(multi_rank_run):
    gate = _gate(multi_rank_run({0: Rank(), 1: Rank(status="failed", exit_code=1, exception="Connection closed by peer")}))
    assert {(r.check, r.mode) for r in gate.failures} == {("mode-finished", "ca"), ("mode-finished", "ca@rank1")}
    [failure] = [r for r in gate.failures if r.mode == "ca@rank1"]
    assert "RuntimeError: Connection closed by peer" in failure.message


def test_process_not_followed_fails(multi_rank_run):
    found = [("process_not_followed", "pid 4242 (python worker.py) was not followed: it was started with os.execv")]
    gate = _gate(multi_rank_run({0: Rank(), 1: Rank()}, main_findings=found))
    [failure] = gate.failures
    assert failure.check == "processes-followed" and "pid 4242" in failure.message
    # A run whose only record is the main process's (nothing followed at all) fails the same way.
    gate = _gate(multi_rank_run({}, main_findings=found, name="none-followed"), GateSettings(max_graph_breaks=CountLimit("total", 0)))
    assert [r.check for r in gate.failures] == ["processes-followed"]


def test_diverging_norms_fail(multi_rank_run):
    gate = _gate(multi_rank_run({0: Rank(param_norm=3.0), 1: Rank(param_norm=3.5)}))
    [failure] = gate.failures
    assert failure.check == "ranks-agree" and "final parameter norm differs across ranks" in failure.message


def test_rank_option_checks_one_rank(multi_rank_run):
    path = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    gate = _gate(path, rank=0)
    assert gate.ranks == (0,)
    assert not [r for r in gate.results if r.mode == "ca@rank1"]
    assert [r.check for r in gate.failures] == ["ranks-agree"]  # the run-level checks still hold
    with pytest.raises(UnreadableInput, match="no rank 4"):
        _gate(path, rank=4)


def test_baseline_of_a_multi_rank_run_is_rank_0s_and_refused_when_a_rank_failed(multi_rank_run):
    from cagtool.record.loader import load_run
    from cagtool.report.gate.baseline import baseline_from_run

    baseline = baseline_from_run(load_run(multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})))
    assert (baseline.modes["ca"].steps, baseline.modes["ca"].ca_graphs) == (6, 1)  # rank 0's, not the launcher's 0
    assert baseline.modes["ca"].process_problems == ()
    failed = baseline_from_run(load_run(multi_rank_run({0: Rank(), 1: Rank(status="failed", exit_code=1)}, name="failed")))
    assert any("rank1: failed" in p for p in failed.modes["ca"].process_problems)


def test_a_rank_started_again_is_gated_on_each_start_and_a_failed_start_is_said(multi_rank_run):
    """Rank 1 started a second time with the same launcher attempt (a second process group the script
    set up), after the first, and that start failed with a recompile: the ranks' table keeps the first
    starts, which agree; the gate checks the second start on its own (`ca@rank1#2`), and compare's
    headline names the failed start, which no row of the table shows."""
    from conftest import cagtool_in_process
    from rank_records import _manifest, _write_process

    run = multi_rank_run({0: Rank(), 1: Rank()})
    manifest = _manifest("pid300", 1, 2, "child", "failed", 1)
    manifest.process.update(pid=300, start_ticks=10**6)  # started after the first starts (theirs: none, read as 0)
    _write_process(run / "ca" / "procs" / "pid300", manifest, Rank(steps=3, caps=[Cap(0), EXTRA], param_norm=None, grad_norm=None))
    gate = _gate(run)
    failed = {(r.check, r.mode) for r in gate.failures}
    assert {("mode-finished", "ca@rank1#2"), ("max-recompiles:ca", "ca@rank1#2")} <= failed
    assert not {mode for _, mode in failed} & {"ca@rank0", "ca@rank1"} and ("ranks-agree", "ca") not in failed
    [again] = [r for r in gate.failures if r.mode == "ca@rank1#2" and r.check == "max-recompiles:ca"]
    assert again.data["start"] == 2 and again.data["rank"] == 1
    headline = cagtool_in_process("compare", str(run)).stdout.splitlines()[0]
    assert ("in ca, rank 1 was started 2 times, not by a launcher's restart (a second process group the script set up, as for "
            "fine-tuning after pretraining?): rank1 finished after 6 steps; pid300 failed, exit 1 after 3 steps") in headline
