"""Per-rank analysis on small hand-made multi-rank records: the table's figures, divergence of CA
graphs and cache misses (first step and miss), final norms, missing and failed ranks."""

from __future__ import annotations

from cagtool.record.loader import load_run
from cagtool.report.ranks.analysis import (
    PROCESS_NOT_FOLLOWED,
    RANK_FAILED,
    RANK_MISSING,
    RANKS_GRAPHS_DIVERGE,
    RANKS_NORMS_DIVERGE,
    RANKS_STEPS_DIFFER,
    agreement,
    analysis_json,
    analyze_ranks,
    ranks_line,
    run_for_rank,
)

from rank_records import Cap, Rank, multi_rank_run  # noqa: F401 - a fixture

EXTRA = Cap(2, node="MulBackward0", call=2, ops=("MulBackward0", "MulBackward0"))


def _analysis(path):
    return analyze_ranks(load_run(path).mode("ca"))


def test_same_sequences_no_finding_and_table(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(), 1: Rank(step_s=0.02)}))
    assert analysis.ranks == (0, 1) and analysis.world_size == 2 and analysis.missing == ()
    assert analysis.findings == () and not analysis.diverge
    row = analysis.rows[1]
    assert (row.key, row.steps, row.ca_graphs, row.cache_misses, row.graph_breaks) == ("rank1", 6, 1, 1, 0)
    assert row.step_time_median_s is not None and abs(row.step_time_median_s - 0.02) < 1e-9
    totals = analysis.totals
    assert (totals.steps, totals.ca_graphs, totals.cache_misses) == (12, 2, 2)
    assert abs(totals.step_time_median_s - 0.02) < 1e-9  # the slowest rank
    assert totals.peak_rss_bytes == 2 * 200 * 2**20


def test_extra_capture_on_one_rank_is_found_with_step_and_miss(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])}))
    [finding] = analysis.of(RANKS_GRAPHS_DIVERGE)
    assert finding.ranks == (0, 1) and finding.step == 2
    assert finding.data["ref_capture"] is None
    assert finding.data["capture"] == {"ca_id": 1, "compile_id": "!1", "step": 2, "miss": "cache miss: new autograd node MulBackward0 at NodeCall 2"}
    assert "part at step 2" in finding.message and "new autograd node MulBackward0 at NodeCall 2" in finding.message
    assert "rank 0 captured no more CA graphs" in finding.message
    assert analysis.diverge and analysis.rows[1].cache_misses == 2


def test_same_step_different_miss_is_found(multi_rank_run):
    other = Cap(2, node="AddBackward0", call=2, ops=("MulBackward0", "AddBackward0"))
    analysis = _analysis(multi_rank_run({0: Rank(caps=[Cap(0), EXTRA]), 1: Rank(caps=[Cap(0), other])}))
    [finding] = analysis.of(RANKS_GRAPHS_DIVERGE)
    assert finding.step == 2 and finding.data["index"] == 1
    assert "MulBackward0" in finding.data["ref_capture"]["miss"] and "AddBackward0" in finding.data["capture"]["miss"]


def test_same_miss_at_another_step_is_found_at_the_earlier_step(multi_rank_run):
    later = Cap(4, node="MulBackward0", call=2, ops=("MulBackward0", "MulBackward0"))
    analysis = _analysis(multi_rank_run({0: Rank(caps=[Cap(0), EXTRA]), 1: Rank(caps=[Cap(0), later])}))
    [finding] = analysis.of(RANKS_GRAPHS_DIVERGE)
    assert finding.step == 2


def test_same_miss_different_graph_is_found(multi_rank_run):
    other_graph = Cap(2, node="MulBackward0", call=2, ops=("MulBackward0", "MulBackward0", "MulBackward0"))
    analysis = _analysis(multi_rank_run({0: Rank(caps=[Cap(0), EXTRA]), 1: Rank(caps=[Cap(0), other_graph])}))
    [finding] = analysis.of(RANKS_GRAPHS_DIVERGE)
    assert "(the graphs differ)" in finding.message


def test_a_compiled_functions_number_is_a_ranks_compile_order_not_another_graph(multi_rank_run):
    """nanoGPT under DDP: rank 0 alone evaluates before training (its master process), so its
    training forward is its second compiled function and the CA graph holds
    CompiledFunctionBackward1 where rank 1's holds CompiledFunctionBackward0: the same graph
    (diff-graphs: identical), read as "the ranks DIVERGE ... (the graphs differ)". Another node kind
    at that place is still a divergence."""
    def cap(name: str, step: int = 0, node: str = "torch::autograd::GraphRoot") -> Cap:
        return Cap(step, node=node, ops=("DivBackward0", name, "MulBackward0"))

    same = _analysis(multi_rank_run({0: Rank(caps=[cap("CompiledFunctionBackward1")]), 1: Rank(caps=[cap("CompiledFunctionBackward0")])}))
    assert not same.of(RANKS_GRAPHS_DIVERGE) and not same.diverge
    # captured again for a recompiled forward's backward: the miss names the node with its number too
    missed = _analysis(multi_rank_run({0: Rank(caps=[Cap(0), cap("CompiledFunctionBackward3", 2, "CompiledFunctionBackward3")]),
                                       1: Rank(caps=[Cap(0), cap("CompiledFunctionBackward2", 2, "CompiledFunctionBackward2")])},
                                      name="missed"))
    assert not missed.of(RANKS_GRAPHS_DIVERGE)
    other = _analysis(multi_rank_run({0: Rank(caps=[cap("CompiledFunctionBackward1")]), 1: Rank(caps=[cap("DivBackward1")])}, name="other"))
    [finding] = other.of(RANKS_GRAPHS_DIVERGE)
    assert "(the graphs differ)" in finding.message


def test_differing_grad_norms_are_a_finding(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(grad_norm=0.5), 1: Rank(grad_norm=0.9)}))
    [finding] = analysis.of(RANKS_NORMS_DIVERGE)
    assert finding.data["quantity"] == "grad_norm" and "not synchronised" in finding.message
    assert not analysis.of(RANKS_GRAPHS_DIVERGE)


def test_norms_of_each_ranks_own_shard_are_not_compared(multi_rank_run):
    shards = {0: Rank(param_norm=3.74, grad_norm=0.5, final_of="shards"), 1: Rank(param_norm=3.06, grad_norm=0.9, final_of="shards")}
    assert _analysis(multi_rank_run(shards)).findings == ()


def test_norms_of_the_models_parameters_are_compared(multi_rank_run):
    model = {0: Rank(param_norm=3.74, final_of="model"), 1: Rank(param_norm=3.06, final_of="model")}
    [finding] = _analysis(multi_rank_run(model)).of(RANKS_NORMS_DIVERGE)
    assert finding.data["quantity"] == "param_norm"


def test_norms_within_tolerance_agree(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(grad_norm=0.5), 1: Rank(grad_norm=0.5 * (1 + 1e-7))}))
    assert analysis.findings == ()


# The message of a rank's AssertionError (torch 2.13, DeepSpeed 0.19.8), shortened, from
# `cagtool run --modes ca torchrun --nproc-per-node 2 sample_scripts/deepspeed_zero.py --stage 3 --ca-backend eager`
ZERO3_UNDER_CA = """1 != 2

from user code:
   File "<eval_with_key>.30", line 187, in torch_dynamo_resume_in_forward_at_179
    call_hook_5 = torch__dynamo_external_utils_call_hook(getitem_211, getitem_9, hook_type = 'post_acc_grad_hook')
  File "/venv/lib/python3.11/site-packages/torch/_dynamo/external_utils.py", line 80, in call_hook
    result = hook(*args)
  File "/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py", line 1515, in reduce_partition_and_remove_grads
    self.reduce_ready_partitions_and_remove_grads(param)
"""


def test_zero3_under_compiled_autograd_is_explained_once(multi_rank_run, capsys):
    from rich.console import Console

    from cagtool.report.ranks.render import render_ranks

    analysis = _analysis(multi_rank_run({r: Rank(status="failed", exit_code=1, exception=ZERO3_UNDER_CA, steps=0) for r in (0, 1)}))
    failed = analysis.of(RANK_FAILED)
    assert len(failed) == 2 and all("ZeRO stage 1 or 2 with compiled autograd" in f.data["explanation"] for f in failed)
    console = Console(width=400, color_system=None)
    with console.capture() as out:
        render_ranks(console, analysis)
    assert out.get().count("what it means: DeepSpeed ZeRO-3") == 1


def test_a_failure_of_unknown_cause_is_not_explained(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(status="failed", exit_code=1, exception="gloo timeout")}, world_size=2))
    assert "explanation" not in analysis.of(RANK_FAILED)[0].data


def test_missing_rank_and_failed_rank(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(status="failed", exit_code=1, exception="gloo timeout")}, world_size=2))
    assert analysis.missing == (1,)
    assert [f.code for f in analysis.findings] == [RANK_MISSING, RANK_FAILED]
    assert "rank 1 of 2 left no record" in analysis.findings[0].message
    assert "RuntimeError: gloo timeout" in analysis.findings[1].message


def test_different_step_counts_and_not_followed(multi_rank_run):
    path = multi_rank_run({0: Rank(steps=6), 1: Rank(steps=5)}, main_findings=[(PROCESS_NOT_FOLLOWED, "pid 77 (python -c ...) was not followed")])
    analysis = _analysis(path)
    assert [f.code for f in analysis.findings] == [PROCESS_NOT_FOLLOWED, RANKS_STEPS_DIFFER]
    data = analysis_json(analysis)
    assert data["diverge"] and data["ranks"][1]["steps"] == 5


def test_single_process_record_has_no_rank_analysis(multi_rank_run, tmp_path):
    run = load_run(multi_rank_run({0: Rank()}))
    single = run.mode("ca")
    single.processes.clear()
    assert analyze_ranks(single) is None


def test_run_for_rank_swaps_each_mode_record(multi_rank_run):
    run = load_run(multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])}))
    view = run_for_rank(run, 1)
    assert view.mode("ca").process_key == "rank1" and run.mode("ca").process_key == "main"
    assert run_for_rank(run, None) is run


def test_divergence_names_the_diff_of_the_two_running_graphs(multi_rank_run):
    path = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    [finding] = _analysis(path).of(RANKS_GRAPHS_DIVERGE)
    # Rank 0 captured nothing new at step 2: it still runs !0, which rank 1's !1 replaced.
    assert finding.data["diff_command"] == f"cagtool diff-graphs {path} 0@0 1@1"


def test_a_rank_stopped_before_a_step_does_not_diverge_there(multi_rank_run):
    """Rank 0 interrupted before its first backward ended, rank 1 captured at step 0: nothing both
    reached differs, so no divergence; the verdict says what was compared, and the stopped rank's
    finding says how many steps it ran of the script's total (what the finished rank ran)."""
    analysis = _analysis(multi_rank_run({0: Rank(steps=0, caps=[], status="interrupted", exit_code=130, param_norm=None, grad_norm=None),
                                         1: Rank(steps=6)}))
    assert not analysis.of(RANKS_GRAPHS_DIVERGE) and not analysis.diverge
    [failed] = analysis.of(RANK_FAILED)
    assert "after 0 steps of 6" in failed.message and failed.data == {"steps": 0, "of_steps": 6}
    verdict = agreement(analysis)
    assert "same final norms" not in verdict and "final norms not compared" in verdict and "rank 0 interrupted after 0 steps" in verdict
    # A capture both ranks ran up to is still compared: a stopped rank that parted before it stopped.
    analysis = _analysis(multi_rank_run({0: Rank(steps=4, caps=[Cap(0)], status="interrupted", exit_code=130),
                                         1: Rank(steps=6, caps=[Cap(0), EXTRA])}, name="parted"))
    [finding] = analysis.of(RANKS_GRAPHS_DIVERGE)
    assert finding.step == 2


def test_no_rank_at_its_end_claims_no_agreement_of_final_norms(multi_rank_run):
    analysis = _analysis(multi_rank_run({0: Rank(steps=3, status="interrupted", exit_code=0), 1: Rank(steps=3, status="interrupted", exit_code=0)}))
    assert analysis.findings and all(f.code == RANK_FAILED for f in analysis.findings)
    assert all("after 3 steps:" in f.message or f.message.endswith("after 3 steps") for f in analysis.findings)
    assert "same final norms" not in agreement(analysis) and "same final norms" not in ranks_line(analysis, 0)
    assert agreement(_analysis(multi_rank_run({0: Rank(), 1: Rank()}, name="both"))) == \
        "the ranks agree: same CA graphs and cache misses, same final norms"


def test_a_step_another_rank_compiled_in_is_no_steady_step_of_any_rank(multi_rank_run):
    """Rank 1 captures a graph at step 4 and rank 0 waits for it at the next collective (2.35 s
    where its steady steps take 10 ms, the DeepSpeed hunt's ZeRO-2 job): rank 0's step 4 compiled
    nothing itself, but it is no steady step either, in the list path and the arrays path alike,
    so no rank's median, interval or CPU figure holds another rank's compile."""
    from cagtool.record.loader import load_mode
    from cagtool.report.figures.metrics import peer_touched, record_step_intervals, step_columns, steady_intervals

    path = multi_rank_run({0: Rank(steps=10, boundary=True, waits={4: 2.35}), 1: Rank(steps=10, boundary=True, caps=[Cap(0), Cap(4)])})
    for columns in (False, True):
        ranks = load_mode(path / "ca", columns=columns).ranks()
        zero = ranks[0]
        assert peer_touched(zero) == frozenset({0, 4}) and peer_touched(ranks[1]) == frozenset({0})
        intervals, excluded, _clock = record_step_intervals(zero)
        assert 4 in excluded and max(intervals) < 0.1, (columns, intervals, excluded)
        assert steady_intervals(step_columns(zero))[1] == excluded
    single = load_mode(multi_rank_run({0: Rank(steps=10, boundary=True, waits={4: 2.35})}, name="one") / "ca").ranks()[0]
    assert peer_touched(single) == frozenset() and 4 not in record_step_intervals(single)[1]  # one rank: its own steps only


def test_one_rank_captured_again_for_other_sizes_is_no_divergence(multi_rank_run):
    """Rank 1 alone captures its backward again at step 4 for other sizes (its last batch is
    smaller: DeepSpeed's ZeRO-2 hunt), the same autograd nodes and hooks: the same collectives, so
    the ranks do not diverge and the gate's ranks-agree passes; the finding says what happened. A
    capture at a new node on one rank still diverges, also when it comes after such a one."""
    from cagtool.report.gate.ranks import run_level_results
    from cagtool.report.ranks.analysis import RANKS_SIZES_DIFFER

    sized = Cap(4, miss_kind="changed_shapes")
    path = multi_rank_run({0: Rank(steps=8), 1: Rank(steps=8, caps=[Cap(0), sized])}, name="sized")
    analysis = _analysis(path)
    assert not analysis.diverge
    [finding] = analysis.of(RANKS_SIZES_DIFFER)
    assert finding.step == 4 and "the same autograd nodes and hooks as the graph it ran before, so the same collectives" in finding.message
    assert agreement(analysis) == "the ranks agree: the same CA graphs (rank 1 also for other sizes at step 4) and cache misses, same final norms"
    [agree] = [r for r in run_level_results(analysis) if r.check.startswith("ranks-agree")]
    assert not agree.failed and "rank 1 also for other sizes at step 4" in agree.message
    later = multi_rank_run({0: Rank(steps=8), 1: Rank(steps=8, caps=[Cap(0), sized, Cap(6, node="AddBackward0", call=2)])}, name="later")
    assert [f.code for f in _analysis(later).findings if f.code in (RANKS_GRAPHS_DIVERGE, RANKS_SIZES_DIFFER)] == [RANKS_GRAPHS_DIVERGE]


def test_a_job_without_ranks_names_the_processes_it_started_as_no_ranks():
    """A DataLoader with workers, no distributed job: its followed workers are said as what they
    are, not as "ranks: 0 recorded"; a job with ranks keeps its table's words."""
    from rich.console import Console

    from cagtool.report.ranks.analysis import RankAnalysis, RankTotals
    from cagtool.report.ranks.render import render_ranks

    totals = RankTotals(0, 0, 0, 0, 0, None, None)
    console = Console(width=400, color_system=None)
    with console.capture() as out:
        render_ranks(console, RankAnalysis("ca", None, (), totals, (), ("pid9606", "pid9608")))
    assert out.get() == "  processes the script started, followed (no rank: DataLoader workers, subprocesses): pid9606, pid9608\n"
    with console.capture() as out:
        render_ranks(console, RankAnalysis("ca", 2, (), totals, (), ("pid9606",)))
    assert out.get().startswith("  ranks: 0 of world size 2 recorded\n") and "other processes followed (no rank): pid9606" in out.get()


def test_a_rank_whose_torch_counters_were_not_saved_shows_its_breaks_as_the_logs(multi_rank_run):
    """A DeepSpeed ZeRO-2 job whose rank 1 failed in a compile: torchrun killed rank 0 before torch's
    counters were saved, and its graph breaks (the log's, one per compile and site: 11) stood beside
    rank 1's torch count (9) as if both were torch's. The log's are marked "~", and the table says why."""
    import io
    import json

    from rich.console import Console

    from cagtool.report.ranks.render import render_ranks

    path = multi_rank_run({0: Rank(), 1: Rank(status="interrupted", exit_code=143)})
    manifest_path = path / "ca" / "procs" / "rank1" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["torch_counters"] = {}
    manifest["options"]["closed_by"] = "reader"  # the process vanished: the loader closed its record
    manifest_path.write_text(json.dumps(manifest))
    analysis = _analysis(path)
    assert [r.graph_breaks_exact for r in analysis.rows] == [True, False]
    out = io.StringIO()
    render_ranks(Console(file=out, width=200), analysis)
    text = out.getvalue()
    assert "~0" in text and "~: graph breaks from the log, one per compile and site" in text, text
