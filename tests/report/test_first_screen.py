"""What a user reads first, on real records: the headline counts a batch-size change once (its
root cause, not the Dynamo and compiled-autograd recompiles it brings) and says what to do; the
summary's recompile lines read without torch's cache-entry ids; the report opens on the headline,
the advice and the verdict; a graph break's marker gives the reason that tells it apart; an
interval from too few steps does not print as "0.00 - infx"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import cli_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import GraphBreakEvent
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.compare.headline import ca_explanation, root_causes, run_headline
from cagtool.report.compare.render import speedup_grid
from cagtool.report.html import charts
from cagtool.report.html.document import run_report
from cagtool.report.figures.metrics import graph_break_sites
from cagtool.report.recompiles.table import recompile_table

pytestmark = pytest.mark.slow  # records runs of the sample scripts


@pytest.fixture(scope="module")
def ragged(record_run) -> Path:
    """ragged_batches.py under ca: batches of 32, then a ragged 4 at step 3 (the same recording
    the recompile-cause tests read)."""
    run = record_run("ragged_batches.py")
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def test_the_headline_counts_a_batch_size_change_once_and_says_what_to_do(ragged):
    run = load_run(ragged)
    comparison = compare_modes(run)
    explanation = ca_explanation(comparison, run)
    assert explanation is not None
    # Three causes in the explanation: the forward's guard failure, the backward's changed sizes
    # that follow from it, and the one-time .grad warm-up; one a user acts on.
    assert len(explanation.causes) == 3
    roots = root_causes(explanation)
    assert [c.code for c in roots] == ["dynamo_guard_failure"]
    line = run_headline(comparison, None, explanation)
    # Torch's 3 captures are 2 CA recompiles, the .grad warm-up said apart (not from the cause: no "all").
    assert line.text.startswith("2 CA recompiles (!1 is the .grad warm-up (captured once), not counted by gate --max-recompiles) and "
                                "2 Dynamo recompiles, from 1 cause: a smaller batch (a DataLoader's last?): the size of `args[0]` "
                                "(dim 0) changed 32->4 at step 3 (the compiled call at ragged_batches.py:27)"), line.text
    assert "changed sizes" not in line.text  # the consequence is not a kind of its own
    assert "mark_dynamic" in line.advice
    # Without the causes, the counts alone (as before).
    assert "cause" not in run_headline(comparison).text
    # `--verify` re-ran the job with the dynamic fixes for that cause and they changed nothing
    # (pytorch/examples' mnist: conv2d's CPU kernel guards the batch >= 16, marked dynamic or not):
    # the advice says so beside itself, not as if unmeasured.
    root = roots[0].number
    no_effect = {"mode": "ca", "fixes": [{"fix": "torch-pgo", "causes": [root], "verdict": "no effect"},
                                         {"fix": "dynamic-sources", "causes": [root], "verdict": "no effect"}]}
    measured = run_headline(comparison, no_effect, explanation)
    assert measured.advice.startswith(line.advice)
    assert measured.advice.endswith("(--verify re-ran this job with torch-pgo, dynamic-sources for it: no effect, the recompiles "
                                    "stayed; see cagtool recompiles --verify)")
    assert "(no fix verified)" in measured.text
    for other in ({"mode": "aot", "fixes": no_effect["fixes"]},  # another mode's causes are numbered apart
                  {"mode": "ca", "fixes": [{"fix": "torch-pgo", "causes": [root + 1], "verdict": "no effect"}]}):
        assert run_headline(comparison, other, explanation).advice == line.advice


def test_the_headline_names_its_causes_by_their_explain_numbers_where_they_are_not_the_first(ragged):
    """--explain numbers every cause (the warm-up and the consequences too); the headline counts
    the root causes only: where those are not --explain's first ones, it says which they are."""
    from dataclasses import replace

    run = load_run(ragged)
    comparison = compare_modes(run)
    explanation = ca_explanation(comparison, run)
    assert explanation is not None and [c.number for c in explanation.causes] == [1, 2, 3]
    assert "in --explain" not in run_headline(comparison, None, explanation).text  # the root is #1
    # The same causes, the root listed last: as #3 of 3.
    moved = [*explanation.causes[1:], explanation.causes[0]]
    renumbered = replace(explanation, causes=tuple(replace(c, number=i) for i, c in enumerate(moved, 1)))
    assert [c.number for c in root_causes(renumbered)] == [3]
    headline = run_headline(comparison, None, renumbered).text
    assert "from 1 cause (#3 in --explain; #1 follows from it; #2 is the .grad warm-up): a smaller batch" in headline, headline


def test_the_summary_opens_on_the_headline_then_what_to_do_and_prints_recompiles_without_cache_entry_ids(ragged):
    code, out, err = cli_in_process("summary", str(ragged), env={"COLUMNS": "400"})
    assert code == 0, err
    lines = out.splitlines()
    assert "from 1 cause" in lines[0]
    assert lines[1].startswith("what to do: ") and "mark_dynamic" in lines[1]
    assert f"cagtool recompiles --explain {ragged}" in re.sub(r"\s*\n\s*", " ", out)  # the line may wrap
    recompiles = [line.strip() for line in lines if line.strip().startswith("recompile ")]
    assert recompiles, out
    for line in recompiles:
        # torch writes `0/0: tensor ...`: the id of the cache entry that failed, not this recompile's.
        assert not re.search(r": -?\s*!?\d+/\d+(/\d+)?: ", line), line
    assert "recompile 0/1 at step 3: tensor 'args[0]' size mismatch at index 0. expected 32, actual 4  (ragged_batches.py:27)" in recompiles
    assert any(line.startswith("recompile !2/3/1 at step 4: tensor 'sizes[0]'") for line in recompiles), recompiles
    # The CA miss for the ragged batch: each changed size with its value before (32 rows) and after.
    miss = next(line for line in lines if "changed sizes" in line and "step 3" in line)
    assert "sizes[0=32->4] of MseLossBackward0 (NodeCall 1)" in miss, miss


def test_the_report_opens_on_the_headline_the_advice_and_the_verdict(ragged):
    html = run_report(load_run(ragged))
    headline = html.index('id="headline"')
    advice = html.index('id="advice"')
    verdict = html.index('<section id="verdict"')
    details = html.index('<section id="details"')
    assert headline < advice < verdict < details
    assert html.index('id="graphs"') < details  # what ran where closes the page
    assert "mark_dynamic" in html[advice:verdict] and 'href="#recompiles"' in html[advice:verdict]
    assert "from 1 cause" in html[headline:advice]


def test_a_graph_break_marker_gives_the_reason_that_tells_it_apart(graph_breaks):
    run = load_run(graph_breaks)
    record = run.modes["ca"]
    rows = [r for r in charts.marker_rows([charts.Series("ca", record, recompile_table(record))]) if r["kind"] == charts.MARKER_BREAK]
    assert len(rows) == len(record.of(GraphBreakEvent)) >= 2
    sites = {s.reason for s in graph_break_sites(record.of(GraphBreakEvent))}
    for row in rows:
        # torch's first line, the same for every CALL break, is not the reason shown.
        assert not row["reason"].startswith("Encountered graph break"), row["reason"]
        assert "\n" not in row["reason"]
        assert row["reason"].startswith("[GB") and "torch._dynamo.graph_break()" in row["reason"]
        assert row["reason"].split("] ", 1)[1] in sites  # the words the text summary prints
        assert "Encountered graph break" not in row["what"]


def test_a_speedup_from_too_few_steps_reads_so_with_no_infinite_figure(record_run):
    recorded = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = load_run(recorded.path)
    comparison = compare_modes(run)
    few = [s for s in comparison.speedups if s.ratio is not None and min(s.steady_steps) < 5]
    assert few, [(s.label, s.steady_steps) for s in comparison.speedups]  # 3 steps: too few to judge
    cells = [cell for row in speedup_grid(comparison.speedups).rows for cell in row]
    assert not any("inf" in cell or "unbounded" in cell for cell in cells), cells
    for row in speedup_grid(comparison.speedups).rows:
        if row[0] in {s.label for s in few}:
            assert row[3] == "too few steady steps", row
    assert "inf" not in run_headline(comparison).text


def test_a_recompile_storm_is_in_the_headline_and_colours_it(record_run):
    """op_loop.py: a different op every step, so compiled autograd captures every backward anew."""
    recorded = record_run("op_loop.py")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = load_run(recorded.path)
    comparison = compare_modes(run)
    line = run_headline(comparison, None, ca_explanation(comparison, run))
    assert "from 1 cause: the backward's autograd graph changed at steps 1-3" in line.text, line.text
    assert "; recompile storm: recompiles on every step after the first" in line.text
    assert line.tone == "bad"
    assert "the same ops every step" in line.advice
    assert run_headline(comparison).tone == "neutral"  # the counts alone do not tell a storm


def test_compare_of_one_run_opens_on_the_same_headline_as_its_summary(ragged):
    code, out, err = cli_in_process("compare", str(ragged), env={"COLUMNS": "400"})
    assert code == 0, err
    summary = cli_in_process("summary", str(ragged), env={"COLUMNS": "400"})[1]
    assert out.splitlines()[:2] == summary.splitlines()[:2]
    assert "from 1 cause" in out.splitlines()[0] and out.splitlines()[1].startswith("what to do: ")
    assert out.count("from 1 cause") == 1  # printed once, not again by the table


def test_a_noise_past_100_percent_reads_so_not_a_huge_percentage(graph_breaks):
    """Processes that differ wildly (two blocks reading 0.60x and 10.4x) must not print
    "+/-5890%": past 100% the words say so. On the real 60-step run's interval, with 50x its noise."""
    from dataclasses import replace

    comparison = compare_modes(load_run(graph_breaks))
    s = next(s for s in comparison.speedups if s.label == "ca/aot")
    assert s.interval is not None
    noisy = replace(s, low=0.1, high=10.0, interval=replace(s.interval, low=0.1, high=10.0, noise=s.interval.noise * 50 + 2.0, seen=True))
    words = noisy.evidence()
    assert "over +/-100%" in words and not re.search(r"\d{3,}%", words.replace("100%", "")), words
    headline = run_headline(replace(comparison, speedups=(noisy,))).text
    assert not re.search(r"\d{3,}%", headline.replace("100%", "")), headline


def test_a_dynamo_recompile_marker_gives_the_failing_guard_without_the_cache_entry_id(ragged):
    run = load_run(ragged)
    record = run.modes["ca"]
    rows = charts.marker_rows([charts.Series("ca", record, recompile_table(record))])
    dynamo = {r["compile_id"]: r["reason"] for r in rows if r["kind"] in (charts.MARKER_DYNAMO, charts.MARKER_DYNAMO_CA)}
    assert dynamo["0/1"] == "tensor 'args[0]' size mismatch at index 0. expected 32, actual 4"
    assert dynamo["!2/3/1"] == "tensor 'sizes[0]' size mismatch at index 1. expected 4, actual 32"


def test_a_verified_fix_is_the_advice(ragged):
    """After `recompiles --verify` (its verification.json, as the summary and report read it), what
    to do is the fix measured on this job, not the general advice."""
    run = load_run(ragged)
    comparison = compare_modes(run)
    explanation = ca_explanation(comparison, run)
    verified = {"fixes": [{"fix": "ca-dynamic", "verdict": "verified", "title": "compiled autograd's sizes start dynamic",
                           "run_flags": ["--dynamic"], "env": {}},
                          {"fix": "torch-pgo", "verdict": "no effect", "title": "torch's own PGO suggestion", "run_flags": [], "env": {"X": "1"}}]}
    line = run_headline(comparison, verified, explanation)
    assert "(fix verified: ca-dynamic)" in line.text
    # How to apply it in the job without cagtool (torch's own setting), then cagtool's flag.
    assert line.advice.startswith("apply fix ca-dynamic, compiled autograd's sizes start dynamic: start compiled autograd dynamic: "
                                  "torch._dynamo.compiled_autograd._enable(compiler, dynamic=True) around the backward"), line.advice
    assert "[cagtool: cagtool run --dynamic]; verified by re-running this job" in line.advice
    assert "mark_dynamic" in run_headline(comparison, {"fixes": [{"fix": "x", "verdict": "no effect"}]}, explanation).advice


def test_the_advice_is_the_verified_fix_that_left_the_fewest_recompiles(ragged):
    """Two verified fixes from one verification (recompiles 4 -> 3 and 4 -> 0): the advice is the
    one the measurements support, whatever the order the table lists them in."""
    run = load_run(ragged)
    comparison = compare_modes(run)
    explanation = ca_explanation(comparison, run)

    def side(ca: int, dynamo: int, graphs: int) -> dict:
        return {"ca_recompiles": [ca], "dynamo_recompiles": [dynamo], "ca_graphs": [graphs]}

    verified = {"baseline": side(2, 2, 3), "fixes": [
        {"fix": "ca-dynamic", "verdict": "verified", "title": "compiled autograd's sizes start dynamic", "run_flags": ["--dynamic"],
         "env": {}, "measured": side(1, 2, 2)},
        {"fix": "torch-pgo", "verdict": "verified", "title": "torch's own PGO suggestion", "run_flags": [],
         "env": {"TORCH_COMPILE_DYNAMIC_SOURCES": "L['x']"}, "measured": side(0, 0, 2)},
    ]}
    advice = run_headline(comparison, verified, explanation).advice
    assert advice.startswith("apply fix torch-pgo"), advice
    assert "set TORCH_COMPILE_DYNAMIC_SOURCES=\"L['x']\" in the job's environment" in advice and "(recompiles 4 -> 0)" in advice


def test_compare_json_and_markdown_of_one_run_carry_the_same_headline_and_advice(ragged):
    summary = cli_in_process("summary", str(ragged), env={"COLUMNS": "2000"})[1].splitlines()
    code, out, err = cli_in_process("compare", str(ragged), "--format", "json")
    assert code == 0, err
    import json

    headline = json.loads(out)["headline"]
    assert headline["text"] == summary[0] and "from 1 cause" in headline["text"]
    assert summary[1].startswith("what to do: " + headline["advice"])
    code, out, err = cli_in_process("compare", str(ragged), "--format", "markdown")
    assert code == 0, err
    lines = out.splitlines()
    assert "from 1 cause" in lines[0] and lines[2].startswith("What to do: ")


@pytest.mark.slow
def test_numerics_that_only_the_reference_recorded_are_not_said_to_agree(record_run, tmp_path_factory):
    """The ca mode fails before its first step (a file the eager mode left outside the working
    directory): only eager recorded a loss, so nothing was compared, and the headline says so,
    never "numerics agree" (torchvision's classification reference with --cache-dataset)."""
    marker = tmp_path_factory.mktemp("cache") / "dataset.cache"
    run = record_run("../tests/scripts/fails_after_first_mode.py", str(marker), modes="eager,ca")
    assert run.returncode != 0
    code, out, _ = cli_in_process("summary", str(run.path))
    first = out.splitlines()[0]
    assert "numerics not compared (only eager recorded values)" in first and "numerics agree" not in first, first
    code, out, _ = cli_in_process("compare", str(run.path), "--format", "json")
    import json

    numerics = json.loads(out)["numerics"]
    assert numerics["compared"] is False and numerics["reference"] == "eager"
    # the job's message, escapes and all, is one plain line in the JSON headline too
    code, out, _ = cli_in_process("summary", str(run.path), "--format", "json")
    text = json.loads(out)["headline"]["text"]
    assert "only if you trust it" in text and "\x1b" not in text, text


def test_a_verified_fix_says_what_it_measured_recompiles_and_compile_time(ragged):
    """The verified fix's measurement on this job in the advice: the recompiles and, where both
    sides have one, the compile time (an evaluation's graph skipped saves compile, not recompiles alone)."""
    run = load_run(ragged)
    comparison = compare_modes(run)
    explanation = ca_explanation(comparison, run)
    fix = {"fix": "ca-dynamic", "verdict": "verified", "title": "t", "run_flags": ["--dynamic"], "env": {},
           "measured": {"ca_recompiles": [0], "dynamo_recompiles": [1], "compile_time_s": 57.104}}
    verified = {"baseline": {"ca_recompiles": [2], "dynamo_recompiles": [1], "compile_time_s": 77.585}, "fixes": [fix]}
    assert "; verified by re-running this job (recompiles 3 -> 1, compile 77.6 s -> 57.1 s)" in run_headline(comparison, verified, explanation).advice
    del verified["baseline"]["compile_time_s"]
    assert "; verified by re-running this job (recompiles 3 -> 1)" in run_headline(comparison, verified, explanation).advice
