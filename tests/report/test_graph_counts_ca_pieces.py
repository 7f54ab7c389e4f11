"""Dynamo's graphs as torch counts them (counters["stats"]["unique_graphs"]) where graph breaks split
a compiled-autograd graph's code into pieces: a non-reentrant checkpoint's unpack hook breaks it at
every saved tensor (tests/scripts/checkpoint_pieces.py, one `cagtool run --dynamic`, 3 steps; the
record test_explain_ordinary_jobs.py reads too: conftest's checkpoint_pieces_run). Each piece is a graph torch counts; "1 forward
graph, 2 backward graphs" named a few of them."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import ROOT, cli_in_process

from cagtool.record.loader import load_run
from cagtool.report.compare.analysis import compare_modes
from cagtool.report.compare.render import mode_grid
from cagtool.report.figures.metrics import mode_metrics


@pytest.mark.slow
def test_the_summary_states_torchs_graph_count_and_parts_that_make_it(checkpoint_pieces_run):
    m = mode_metrics(load_run(checkpoint_pieces_run).modes["ca"])
    torch_count = m.unique_graphs
    assert torch_count is not None and torch_count > m.forward_graphs + m.ca_graphs  # the pieces
    code, text, err = cli_in_process("summary", str(checkpoint_pieces_run), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0, err
    line = next(line for line in text.splitlines() if "Dynamo:" in line)
    said = re.search(r"Dynamo: (\d+) graphs \(torch's unique_graphs\) = (.*?); \d+ graph breaks", line)
    assert said is not None, line
    assert int(said[1]) == torch_count, line
    parts = said[2].split(" + ")
    assert parts[0] == f"{m.forward_graphs} forward", line
    assert parts[1].startswith(f"{m.ca_graphs} backward (compiled-autograd graph"), line
    assert any(p.endswith("pieces of that code split off by graph breaks") for p in parts), line
    assert sum(int(p.split()[0]) for p in parts) == torch_count, line  # every graph torch counted, attributed
    assert "forward graph," not in line and "backward graphs," not in line, line
    # the same parts in the JSON a CI reads, summing to torch's count
    code, out, err = cli_in_process("summary", str(checkpoint_pieces_run), "--format", "json")
    assert code == 0, err
    mode = json.loads(out)["modes"]["ca"]
    parts = mode["unique_graphs_parts"]
    assert mode["unique_graphs"] == torch_count and sum(parts.values()) == torch_count, parts
    assert parts["forward"] == m.forward_graphs and parts["ca"] == m.ca_graphs and parts["ca_pieces"] > 0, parts


@pytest.mark.slow
def test_the_side_by_side_table_states_torchs_graph_count(checkpoint_pieces_run):
    m = mode_metrics(load_run(checkpoint_pieces_run).modes["ca"])
    grid = mode_grid(compare_modes(load_run(checkpoint_pieces_run)))
    row = next((r for r in grid.rows if r[0] == "Dynamo graphs (torch)"), None)
    assert row is not None, grid.rows
    assert row[1].startswith(f"{m.unique_graphs} ({m.forward_graphs} forward, {m.ca_graphs} CA, "), row
    assert "CA pieces by graph breaks" in row[1], row


@pytest.mark.slow
def test_the_before_after_table_states_torchs_graph_count_where_it_is_split(checkpoint_pieces_run, graph_breaks):
    """`compare A B`: the row of torch's count, where a side's code was split into pieces (a change
    in them is a change in what the job compiles), with its change; none where neither side's is."""
    from cagtool.report.compare.analysis import compare_runs
    from cagtool.report.compare.render import change_grid

    m = mode_metrics(load_run(checkpoint_pieces_run).modes["ca"])
    split = change_grid(compare_runs(load_run(checkpoint_pieces_run), load_run(checkpoint_pieces_run)))
    assert [row[2:] for row in split.rows if row[1] == "Dynamo graphs (torch)"] == [[str(m.unique_graphs), str(m.unique_graphs), "="]]
    plain = change_grid(compare_runs(load_run(graph_breaks), load_run(graph_breaks)))
    assert not any(row[1] == "Dynamo graphs (torch)" for row in plain.rows)


def test_a_job_without_pieces_reads_as_before(graph_breaks):
    """graph_breaks.py (breaks in the forward only): torch's count is the forward and backward
    graphs'; the line and the table read as they did, no row of torch's count."""
    record = load_run(graph_breaks)
    for name, mode in record.modes.items():
        m = mode_metrics(mode)
        assert m.unique_graphs == m.forward_graphs + m.ca_graphs, (name, m.unique_graphs)
    code, text, err = cli_in_process("summary", str(graph_breaks), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0, err
    lines = [line for line in text.splitlines() if "Dynamo:" in line]
    # A compiled-autograd mode's backward graphs are its CA graphs, with the AOT backward graphs apart.
    assert lines and all(re.match(r"\s+Dynamo: \d+ forward graphs?, (\d+ backward graphs?|\d+ CA graphs?, \d+ AOT backward graphs?), \d+ graph break", line)
                         for line in lines), lines
    code, out, err = cli_in_process("summary", str(graph_breaks), "--format", "json")
    assert code == 0 and all(m["unique_graphs_parts"] is None for m in json.loads(out)["modes"].values()), out[:2000]
    assert "unique_graphs" not in text
    assert all(r[0] != "Dynamo graphs (torch)" for r in mode_grid(compare_modes(record)).rows)


@pytest.mark.slow
def test_the_headline_names_the_checkpoint_that_split_the_ca_graph_and_where_it_must_run(checkpoint_pieces_run, record_run, tmp_path):
    """The pieces cost a Dynamo compile each whether or not they recompile (an HF model with
    gradient_checkpointing_enable() and backend eager: 31 pieces, 200 s of compile, 7.5 s with
    aot_eager; docs/torch-internals.md): the headline says so, with where the checkpoint must run."""
    m = mode_metrics(load_run(checkpoint_pieces_run).modes["ca"])
    code, text, err = cli_in_process("summary", str(checkpoint_pieces_run), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0, err
    headline = " ".join(text.split("\nwhat to do:")[0].split())  # the headline, wrapped at 400 columns
    assert (f"the CA graph's code split into {m.ca_code_graphs.pieces + 1} pieces, each compiled by Dynamo, at the unpack hooks "
            "of non-reentrant checkpointing (torch.utils.checkpoint, gradient_checkpointing_enable()): run the checkpoint in code "
            "compiled with a backend that runs AOTAutograd (aot_eager, inductor)") in headline, headline
    # Its 13 recompiles, most of them the pieces' own, outnumber the pieces: their cause's fix is the advice.
    advice = text.split("\nwhat to do: ")[1]
    assert not advice.startswith(("Call the checkpoint inside the compiled function", "Your torch.compile at")), advice
    # Without --dynamic the causes are 3 recompiles, fewer than the pieces compiled on every run: the
    # checkpoint's fix is the advice (an HF model with gradient checkpointing: 1 recompile, 30 pieces).
    static = record_run(str(ROOT / "tests" / "scripts" / "checkpoint_pieces.py"))
    assert static.returncode == 0, static.stderr[-2000:]
    code, text, err = cli_in_process("summary", str(static.path), env={"CI": "true", "COLUMNS": "400"})
    # The job's one torch.compile is on the eager backend: the backend is named first, where it was set.
    advice = " ".join(text.split("\nwhat to do: ")[1].split())
    assert advice.startswith('Your torch.compile at tests/scripts/checkpoint_pieces.py:24 compiles with backend="eager", which runs a '
                             "checkpoint in the compiled code as eager checkpointing does"), advice
    assert ("and call the checkpoint inside the compiled function (torch.compile a function or module whose code calls "
            "torch.utils.checkpoint.checkpoint, not checkpoint(compiled_fn, ...))") in advice, advice
    # A record is read, not trusted: a compile call whose line is no number is not quoted.
    forged = shutil.copytree(static.path, tmp_path / "forged", symlinks=True)
    manifest = json.loads((forged / "ca" / "manifest.json").read_text())
    manifest["options"]["compile_calls"][0]["line"] = "9**9**9"
    (forged / "ca" / "manifest.json").write_text(json.dumps(manifest))
    code, text, err = cli_in_process("summary", str(forged), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0 and text.split("\nwhat to do: ")[1].startswith("Call the checkpoint inside the compiled function"), text + err


@pytest.mark.slow
def _ca_summary(record_run, script: str):
    """(the recorded run, its summary's text, headline and advice, each on one line) of `script` in
    the ca mode with aot_eager."""
    run = record_run(script, modes="ca", backend="aot_eager")
    assert run.returncode == 0, run.stderr[-2000:]
    code, text, err = cli_in_process("summary", str(run.path), env={"CI": "true", "COLUMNS": "400"})
    assert code == 0, err
    headline, advice = (" ".join(part.split()) for part in text.split("\nwhat to do: ", 1))
    return run, text, headline, advice


def test_a_checkpoint_broken_by_a_side_effect_inside_compiled_code_names_the_break_and_the_config_that_removes_it(record_run, tmp_path):
    """transformers' gradient checkpointing (a tiny Llama, HF Trainer with torch_compile and
    aot_eager: 133 pieces, 1,028 s of compile) calls the checkpoint inside the compiled forward, but
    its checkpointed layer sets a context variable: Dynamo breaks the graph inside the checkpoint
    ("HOP: Unsafe side effect"), which then runs as eager checkpointing does. The advice was to call
    the checkpoint inside the compiled function with aot_eager, which the job already did.
    tests/scripts/checkpoint_side_effect.py is that shape (an attribute of an outer object set in the
    checkpointed function): the break is named where it is, and the config it names takes the
    breaks and the pieces away, checked by recording the job with it; `cagtool checkpointing`
    verifies that fix on the recorded job, re-run with the config set (the script unchanged)."""
    script = str(ROOT / "tests" / "scripts" / "checkpoint_side_effect.py")
    run, text, headline, advice = _ca_summary(record_run, script)
    assert ("the checkpoint runs in compiled code, but Dynamo broke the graph inside it (tests/scripts/checkpoint_side_effect.py:28), "
            "so it ran as eager checkpointing does") in headline, headline
    assert advice.startswith("The checkpoint is called inside compiled code, but Dynamo broke the graph inside it at "
                             "tests/scripts/checkpoint_side_effect.py:28 (\"HOP: Non-nullified side effect\""), advice
    assert "`torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True`" in advice, advice
    assert "Call the checkpoint inside the compiled function" not in text
    pieces = mode_metrics(load_run(run.path).modes["ca"]).ca_code_graphs.pieces
    fixed = record_run(script, "--skip-side-effects", modes="ca", backend="aot_eager")
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    after = mode_metrics(load_run(fixed.path).modes["ca"])
    assert pieces > 0 and after.ca_code_graphs.pieces == 0 and after.graph_breaks == 0, (pieces, after.ca_code_graphs, after.graph_breaks)
    copy = shutil.copytree(run.path, tmp_path / "run")  # the session's recording is shared: measured in a copy
    code, out, err = cli_in_process("checkpointing", str(copy), "--modes", "ca", "--format", "json", env={"CI": "true"}, cwd=ROOT)
    assert code == 0, err[-3000:]
    [measured] = json.loads(out)["modes"]
    written, skipped = measured["checkpointed"], measured["side_effects_skipped"]
    assert skipped["variant"] == "skip_side_effects" and skipped["status"] == "finished", skipped
    assert written["graph_breaks"] == mode_metrics(load_run(run.path).modes["ca"]).graph_breaks > 0 and skipped["graph_breaks"] == 0, measured
    assert measured["non_reentrant"] is None  # a non-reentrant checkpoint: that fix is not tried
    from cagtool.report.checkpointing import checkpointing_lines

    [line] = [line for line in checkpointing_lines(json.loads(out)) if "skip_fwd_side_effects_in_bwd_under_checkpoint" in line]
    assert line.startswith(f"ca: a side effect broke the graph inside a checkpoint the compiled code calls, so it ran as eager "
                           f"checkpointing does; fix torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True") \
        and re.search(rf": {written['graph_breaks']} graph breaks, compile [\d.]+ s -> 0 graph breaks, compile [\d.]+ s: VERIFIED$", line), line


def test_a_side_effect_in_a_librarys_checkpointed_code_is_fixed_by_the_config_not_moved():
    """transformers 5's GradientCheckpointingLayer breaks the graph inside the checkpoint through a
    context variable of the `kernels` package ("HOP: Unsafe side effect" at
    kernels/_internals/layer/layer.py:507, an HF LoRA job under Trainer): the user cannot move a
    library's side effect, so the advice is the config alone; the script's own side effect (the
    test above) is told to move it first."""
    from cagtool.report.recompiles.explain import checkpoint_fix
    from cagtool.report.recompiles.table import RecompileTable

    reason = ("HOP: Unsafe side effect\n  Explanation: Mutating a variable from outside the scope of this HOP is not supported.")
    for root in ("/v/lib/python3.11/site-packages/", "/usr/lib/python3/dist-packages/"):
        table = RecompileTable(mode="ca", rows=[], steps=4, last_step=3, cwd="/w",
                               break_reasons={(root + "kernels/_internals/layer/layer.py", 507): reason})
        advice = checkpoint_fix(table)
        assert advice.startswith("The checkpoint is called inside compiled code, but Dynamo broke the graph inside it at "
                                 "kernels/_internals/layer/layer.py:507 (\"HOP: Unsafe side effect\""), advice
        assert ("The side effect is in kernels (a library's code, not yours): where it need not run again when the backward "
                "recomputes the forward, set `torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True`") in advice, advice
        assert "Move that side effect" not in advice and "`cagtool checkpointing` re-runs the job with it set" in advice, advice
    table = RecompileTable(mode="ca", rows=[], steps=4, last_step=3, cwd="/w", break_reasons={("/w/train.py", 28): reason})
    assert "Move that side effect out of the checkpointed code" in checkpoint_fix(table)


def test_checkpoint_sequential_is_named_as_what_dynamo_does_not_trace_and_the_loop_that_does(record_run):
    """torch.utils.checkpoint.checkpoint_sequential inside the compiled forward (the checkpoint called
    in compiled code, as the usual advice asks): torch marks it skipped, Dynamo breaks at its call
    and runs its checkpoints eagerly, and their unpack hooks split the CA graph. The advice was to
    call the checkpoint inside the compiled function, which the job did; it names checkpoint_sequential
    and the loop of checkpoint() calls that traces, checked by recording the job with that loop."""
    script = str(ROOT / "tests" / "scripts" / "checkpoint_sequential.py")
    run, text, headline, advice = _ca_summary(record_run, script)
    assert "checkpoint_sequential (tests/scripts/checkpoint_sequential.py:36), which Dynamo does not trace, ran its checkpoints eagerly" in headline
    assert advice.startswith("torch.utils.checkpoint.checkpoint_sequential is a function Dynamo does not trace"), advice
    assert "a loop of torch.utils.checkpoint.checkpoint(segment, x, use_reentrant=False)" in advice
    assert "Call the checkpoint inside the compiled function" not in text
    before = mode_metrics(load_run(run.path).modes["ca"])
    looped = record_run(script, "--loop", modes="ca", backend="aot_eager")
    assert looped.returncode == 0, looped.stderr[-2000:]
    after = mode_metrics(load_run(looped.path).modes["ca"])
    assert before.ca_code_graphs.pieces > 0 and before.graph_breaks > 0, (before.ca_code_graphs, before.graph_breaks)
    assert after.ca_code_graphs.pieces == 0 and after.graph_breaks == 0, (after.ca_code_graphs, after.graph_breaks)
