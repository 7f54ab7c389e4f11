"""The headline of a multi-rank run: its figures are one rank's (rank 0's unless --rank), but what
the other ranks did is said in it: where the ranks part, and the ranks that recompiled otherwise.
The job: conftest's `ddp_ranks_diverge_gated`, a real 2-rank gloo DDP job (mp.spawn, ca mode,
eager backend) whose rank 1 alone runs one extra op at step 2, so captures a second CA graph there,
recorded once for this module, the ranks report's tests and the gate's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import cagtool_in_process, ddp_ranks_diverge_gated

from cagtool.record.loader import load_run
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.compare.headline import BAD, ca_explanation, run_headline
from cagtool.report.gate.ranks import run_level_results
from cagtool.report.ranks.analysis import analyze_ranks, focused_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory) -> Path:
    run, proc = ddp_ranks_diverge_gated(tmp_path_factory)
    meta = json.loads((run / "run.json").read_text())
    assert meta["mode_exit_codes"] == {"ca": 0}, proc.stderr[-3000:]
    return run


def cagtool(*args: str) -> subprocess.CompletedProcess:
    return cagtool_in_process(*args, env={"CI": "true", "COLUMNS": "100"})


def headline_on(run_dir: Path, rank: int | None = None):
    run = load_run(run_dir)
    view, _ = focused_run(run, rank)
    comparison = compare_modes(view)
    return run, run_headline(comparison, None, ca_explanation(comparison, view))


def test_the_headline_leads_with_the_ranks_parting_and_names_rank_1s_recompile(ddp_run):
    run, line = headline_on(ddp_run)
    text = line.text
    # Rank 0 recompiled nothing, rank 1 did: never "no recompiles".
    assert "no recompiles" not in text, text
    assert "rank 1: 1 CA recompile (new autograd nodes); rank 0: none" in text, text
    assert "ca: 1 CA graph on rank 0 (rank 1: 2)" in text, text
    # The divergence is report.ranks' own finding, the one the gate's ranks-agree check fails on.
    analysis = analyze_ranks(run.modes["ca"])
    [finding] = analysis.divergences
    assert text.startswith(f"the ranks DIVERGE in ca: {finding.message}"), text
    assert "ranks 0 and 1 part at step 2" in finding.message
    [agree] = [r for r in run_level_results(analysis) if r.check == "ranks-agree"]
    assert agree.failed and finding.message in agree.message
    assert line.tone == BAD


def test_on_rank_1_the_headline_names_rank_0(ddp_run):
    _, line = headline_on(ddp_run, rank=1)
    text = line.text
    assert text.startswith("the ranks DIVERGE in ca: ranks 0 and 1 part at step 2"), text
    assert "rank 1: 1 CA recompile" in text and "; rank 0: none" in text, text
    assert "ca: 2 CA graphs on rank 1 (rank 0: 1)" in text, text


def test_compare_and_summary_print_it_first(ddp_run):
    for command in (("compare", str(ddp_run)), ("summary", str(ddp_run))):
        out = cagtool(*command)
        assert out.returncode == 0, out.stderr
        first = (out.stdout or out.stderr).splitlines()[0]
        assert first.startswith("the ranks DIVERGE in ca: ranks 0 and 1 part at step 2"), out.stdout + out.stderr
        assert "no recompiles" not in first
    data = json.loads(cagtool("compare", str(ddp_run), "--format", "json").stdout)
    assert data["headline"]["text"].startswith("the ranks DIVERGE in ca") and data["headline"]["tone"] == BAD


def test_many_ranks_are_grouped_and_counted(ddp_run):
    """Ranks that recompiled alike are one group ("ranks 2-4: ... each"); past three groups the
    rest are counted, so a 64-rank job's headline stays one line."""
    from dataclasses import replace

    run = load_run(ddp_run)
    view, _ = focused_run(run, None)
    comparison = compare_modes(view)
    scope = comparison.ranks
    base = scope.metrics["ca"][0]
    recompiles = {0: 0, 1: 1, 2: 2, 3: 2, 4: 2, 5: 3, 6: 4, 7: 0}
    ranks = {rank: replace(base, ca_recompiles=n, ca_shape_recompiles=n) for rank, n in recompiles.items()}
    line = run_headline(replace(comparison, ranks=replace(scope, metrics={"ca": ranks})))
    assert ("rank 1: 1 CA recompile (changed sizes), ranks 2-4: 2 CA recompiles (changed sizes) each, "
            "rank 5: 3 CA recompiles (changed sizes), 1 more rank differs; rank 0: none") in line.text, line.text
