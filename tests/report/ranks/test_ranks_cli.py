"""The report commands on hand-made multi-rank runs, in-process through the real CLI entry point
(the same argument parsing and exit codes; no torch import, so these stay fast)."""

from __future__ import annotations

import json

import pytest
from rank_records import Cap, Rank, multi_rank_run  # noqa: F401 - a fixture

from cagtool.cli import main

EXTRA = Cap(2, node="MulBackward0", call=2, ops=("MulBackward0", "MulBackward0"))


@pytest.fixture
def cli(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _text(out: str) -> str:
    return "\n".join(line.rstrip() for line in out.splitlines())


def test_summary_per_rank_table_totals_and_divergence(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA], step_s=0.02)})
    code, out, _ = cli("summary", str(run))
    assert code == 0
    text = _text(out)
    # The launcher trains nothing itself: its 0 steps are not read as the job's.
    assert "mode ca (main process: the launcher, which trains nothing itself; its ranks are below): finished" in text
    assert """\
  ranks: 2 of world size 2 recorded
     rank  status    steps  CA graphs  cache misses  graph breaks  step time  peak RSS
        0  finished      6          1             1             0   10.00 ms   200 MiB
        1  finished      6          2             2             0   20.00 ms   200 MiB
    total  2 ranks      12          3             3             0   20.00 ms   400 MiB""" in text
    assert "rank finding: ranks 0 and 1 part at step 2" in text


def test_summary_json_carries_ranks_and_findings(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(grad_norm=0.5), 1: Rank(grad_norm=2.0)})
    code, out, _ = cli("summary", str(run), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert [r["rank"] for r in data["ranks"]["ranks"]] == [0, 1]
    assert data["ranks"]["totals"]["steps"] == 12
    assert [f["code"] for f in data["ranks"]["findings"]] == ["ranks_norms_diverge"]
    assert data["modes"]["ca"]["ranks"] == data["ranks"]


def test_summary_rank_focus_and_unknown_rank(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    code, out, _ = cli("summary", str(run), "--rank", "1")
    assert code == 0
    assert "mode ca, rank 1: finished in 1.0 s, 6 steps" in out and "CA graphs: 2 (1 initial, 1 for a new autograd node)" in out
    assert "ranks: 2" not in out
    code, out, _ = cli("summary", str(run), "--rank", "1", "--format", "json")
    data = json.loads(out)
    assert data["rank"] == 1 and data["ca_graphs"] == 2
    # The figures are rank 1's; the ranks' analysis is still the whole job's: every rank recorded,
    # none missing, and where they part.
    ranks = data["modes"]["ca"]["ranks"]
    assert [r["rank"] for r in ranks["ranks"]] == [0, 1] and ranks["missing_ranks"] == []
    assert ranks["diverge"] is True and [f["code"] for f in ranks["findings"]] == ["ranks_graphs_diverge"]
    assert ranks["shown_rank"] == 1 and data["ranks"] == ranks
    code, _, err = cli("summary", str(run), "--rank", "5")
    assert code == 3 and "no rank 5 (ranks: 0, 1)" in err


def test_recompiles_defaults_to_rank_0_and_says_the_ranks_diverge(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    code, out, _ = cli("recompiles", str(run))
    assert code == 0
    text = " ".join(out.split())
    assert "mode ca: ranks 0, 1 of world size 2; showing rank 0 (--rank N for another); the ranks DIVERGE: ranks 0 and 1 part at step 2" in text
    assert "mode ca: 0 recompiles in 6 steps" in text
    code, out, _ = cli("recompiles", str(run), "--rank", "1", "--format", "json")
    data = json.loads(out)
    assert data["modes"]["ca"]["counts"]["ca_cache_misses"] == 2  # torch's: one per capture
    assert data["ranks"][0]["shown_rank"] == 1 and data["ranks"][0]["diverge"] is True


def test_recompiles_says_when_ranks_agree(cli, multi_rank_run):
    code, out, _ = cli("recompiles", str(multi_rank_run({0: Rank(), 1: Rank()})))
    assert code == 0 and "the ranks agree (same CA graphs and cache misses, same final norms)" in " ".join(out.split())


def test_diff_graphs_reads_the_rank(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    code, out, _ = cli("diff-graphs", str(run))
    assert code == 0 and "showing rank 0" in out and "has one compiled-autograd graph (!0)" in " ".join(out.split())
    code, out, _ = cli("diff-graphs", str(run), "--rank", "1", "-f", "unified")
    assert code == 1  # the graphs differ, like diff
    assert "showing rank 1" in out and "procs/rank1/graphs/ca_1.py" in out
    assert "new autograd node MulBackward0 at NodeCall 2, step 2" in out


def test_compare_reads_rank_0_then_shows_every_rank(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA], step_s=0.02)})
    code, out, _ = cli("compare", str(run))
    assert code == 0
    assert "a multi-rank run (ranks 0, 1): comparing rank 0's records" in " ".join(out.split())
    assert "10.000 ms" in out  # rank 0's step time, not the launcher's (it ran no steps)
    assert "mode ca:" in out and "rank finding: ranks 0 and 1 part at step 2" in " ".join(out.split())
    code, out, _ = cli("compare", str(run), "--rank", "1", "-f", "json")
    data = json.loads(out)
    assert data["modes"]["ca"]["ca_graphs"] == 2 and data["ranks"]["run"]["compared_rank"] == 1
    assert data["ranks"]["run"]["modes"]["ca"]["diverge"] is True


def test_diff_graphs_across_ranks_as_the_finding_suggests(cli, multi_rank_run):
    run = multi_rank_run({0: Rank(), 1: Rank(caps=[Cap(0), EXTRA])})
    code, out, _ = cli("summary", str(run))
    assert "the two graphs: cagtool diff-graphs" in out and "".join(out.split()).count(f"{run}0@01@1") == 1
    code, out, _ = cli("diff-graphs", str(run), "0@0", "1@rank1", "-f", "unified")
    assert code == 1
    assert "showing ranks 0 and 1" in " ".join(out.split())
    assert "procs/rank0/graphs/ca_0.py" in out and "procs/rank1/graphs/ca_1.py" in out
    assert "autograd nodes: +MulBackward0 (NodeCall 2)" in out
    code, _, err = cli("diff-graphs", str(run), "0@0", "0@7")
    assert code == 3 and "no rank 7" in err


def test_summary_shows_peak_cuda_memory_only_when_a_rank_used_cuda(cli, multi_rank_run):
    code, out, _ = cli("summary", str(multi_rank_run({0: Rank(cuda_peak=2**30), 1: Rank(cuda_peak=3 * 2**29)})))
    text = _text(out)
    assert "graph breaks  step time  peak RSS  peak CUDA" in text
    assert "   400 MiB   2560 MiB" in text  # totals: RSS and CUDA summed
    code, out, _ = cli("summary", str(multi_rank_run({0: Rank(), 1: Rank()}, name="cpu")))
    assert "peak CUDA" not in out
