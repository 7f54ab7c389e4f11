"""`cagtool diff-graphs` end to end: the real CLI on runs that `cagtool run` recorded from
sample_scripts/ (backend eager), plus argument parsing and bad inputs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import cagtool_in_process

pytestmark = pytest.mark.slow


def diff(*args: str) -> subprocess.CompletedProcess:
    return cagtool_in_process("diff-graphs", *args, env={"CI": "true", "COLUMNS": "120"})


def diff_json(*args: str) -> tuple[int, dict]:
    proc = diff(*args, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def op_loop(record_run) -> Path:
    run = record_run("op_loop.py")
    assert run.returncode == 0, run.stderr
    return run.path


@pytest.fixture(scope="module")
def shape_loop(record_run) -> Path:
    run = record_run("shape_loop.py")
    assert run.returncode == 0, run.stderr
    return run.path


@pytest.fixture(scope="module")
def hook_added(record_run) -> Path:
    """A gradient hook registered at step 2: that backward misses the CA cache (!1) and its graph
    gains a call_hook node. The recompile tests read the same recording."""
    run = record_run("hook_added_midrun.py")
    assert run.returncode == 0, run.stderr
    return run.path


@pytest.fixture(scope="module")
def gan_last_batch(record_run) -> Path:
    """tests/scripts/gan_last_batch.py: a GAN's three backward calls a step (dcgan's errD_real,
    errD_fake, errG), each a graph at step 0 (!0, !1, !2), each recaptured with dynamic sizes at
    the last, smaller batch (!3, !4, !5)."""
    run = record_run("../tests/scripts/gan_last_batch.py")
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def test_op_loop_graphs_differ_by_the_one_autograd_node(op_loop):
    code, doc = diff_json(str(op_loop), "1", "2")
    assert code == 1
    (c,) = doc["comparisons"]
    s = c["summary"]
    assert (s["inserted"], s["removed"], s["changed"]) == (0, 0, 1)
    (change,) = c["changes"]
    assert (change["old"]["target"], change["new"]["target"]) == ("SubBackward0", "MulBackward0")
    assert s["autograd_nodes_added"] == ["MulBackward0 (NodeCall 2)"]
    assert s["autograd_nodes_removed"] == ["SubBackward0 (NodeCall 2)"]
    assert c["new"]["recompile"] == "new autograd node MulBackward0 at NodeCall 2, step 2, op_loop.py:12"  # mul: the loop's third op


def test_no_ids_compares_each_graph_with_the_one_it_replaced(op_loop):
    code, doc = diff_json(str(op_loop))
    assert code == 1
    pairs = [(c["old"]["ca_id"], c["new"]["ca_id"]) for c in doc["comparisons"]]
    assert pairs == [(0, 1), (1, 2), (2, 3)]
    assert [c["paired_by"] for c in doc["comparisons"]] == ["backward_call"] * 3  # one backward call, its graph swapped each step
    added = [c["summary"]["autograd_nodes_added"] for c in doc["comparisons"]]
    assert added == [["SubBackward0 (NodeCall 2)"], ["MulBackward0 (NodeCall 2)"], ["DivBackward0 (NodeCall 2)"]]


def test_each_of_a_gans_graphs_is_compared_with_the_one_its_backward_call_replaced(gan_last_batch):
    """At the last batch each call's graph is recaptured with dynamic sizes: !3 replaces !0, !4
    replaces !1 (the same autograd nodes as !0 and !3: only its call tells it apart), !5 replaces
    !2. Against those the diff is the sizes that became symbolic and nothing else; against the
    graph captured just before (!2 -> !3, the generator's against the discriminator's) it was a
    hundred unrelated nodes."""
    code, doc = diff_json(str(gan_last_batch))
    assert code == 1
    comparisons = doc["comparisons"]
    assert [(c["old"]["ca_id"], c["new"]["ca_id"]) for c in comparisons] == [(0, 1), (1, 2), (0, 3), (1, 4), (2, 5)]
    assert [c["paired_by"] for c in comparisons] == ["capture_order", "capture_order", "backward_call", "backward_call", "backward_call"]
    for c in comparisons[2:]:
        s = c["summary"]
        assert c["new"]["miss_kind"] == "changed_shapes"
        assert s["removed"] == 0 and not s["autograd_nodes_added"] and not s["autograd_nodes_removed"], c["new"]["compile_id"]
        assert s["became_symbolic"] and all(b["old"] == "8" and b["new"].startswith("sizes[") for b in s["became_symbolic"])
    proc = diff(str(gan_last_batch), "-f", "stat")
    lines = proc.stdout.splitlines()
    assert "!1 replaced no earlier graph of its backward call (gan_last_batch.py:21): shown against !0, the graph captured before it" in lines
    assert "!2 replaced no earlier graph of its backward call (gan_last_batch.py:24): shown against !1, the graph captured before it" in lines
    assert sum("the graph captured before it" in line for line in lines) == 2
    headers = [line.split()[1] for line in lines if line.startswith(("--- !", "+++ !"))]
    assert headers == ["!0", "!1", "!1", "!2", "!0", "!3", "!1", "!4", "!2", "!5"]
    code, doc = diff_json(str(gan_last_batch), "2", "3")  # two ids given: those two, paired by nobody
    assert doc["comparisons"][0]["paired_by"] is None


def test_without_backward_calls_a_shape_change_is_tied_by_its_autograd_nodes_and_the_rest_by_capture_order(gan_last_batch, tmp_path):
    """A record whose misses name no backward call (an imported log's): a shape change is paired
    with the latest earlier graph of the same autograd nodes (the generator's !5 with !2); a graph
    that nothing ties to an earlier one is shown against the graph captured before it, and says so."""
    run = tmp_path / "no_calls"
    shutil.copytree(gan_last_batch, run)
    events = run / "ca" / "events.jsonl"
    forged = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "ca_cache_miss":
            event["source"] = event["backward_call"] = None
        forged.append(json.dumps(event))
    events.write_text("".join(line + "\n" for line in forged))
    code, doc = diff_json(str(run))
    by = {c["new"]["ca_id"]: (c["old"]["ca_id"], c["paired_by"]) for c in doc["comparisons"]}
    assert by[1] == (0, "capture_order") and by[2] == (1, "capture_order") and by[5] == (2, "autograd_nodes")
    lines = diff(str(run), "-f", "stat").stdout.splitlines()
    assert "the record ties !1 to no earlier graph: shown against !0, the graph captured before it" in lines


def test_shape_loop_sizes_become_symbolic(shape_loop):
    code, doc = diff_json(str(shape_loop), "0", "1")
    assert code == 1
    (c,) = doc["comparisons"]
    symbolic = c["summary"]["became_symbolic"]
    assert symbolic and all(b["old"] == "10" and b["new"].startswith("sizes[") for b in symbolic)
    assert c["new"]["miss_kind"] == "changed_shapes"
    assert c["new"]["recompile"].startswith("4 changed tensor shapes")


def test_unified_text_names_the_recompile_and_the_symbolic_sizes(shape_loop):
    proc = diff(str(shape_loop), "--format", "unified")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("--- !0 ") and lines[1].startswith("+++ !1 ")
    assert lines[2].startswith("recompile that produced !1: 4 changed tensor shapes")
    assert "+sum_backward0 = SumBackward0([validate_outputs[0]], [True], [sizes[0], sizes[1]])  # changed: args" in lines
    assert any(line.startswith("became symbolic (4): 10 → sizes[0]") for line in lines)


def test_the_same_script_recorded_twice_gives_identical_graphs(record_run, op_loop):
    again = record_run("op_loop.py", "again")  # a second, separate recording
    assert again.returncode == 0, again.stderr
    for ca_id in range(4):
        proc = diff(f"{op_loop}:{ca_id}", f"{again.path}:{ca_id}")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "identical" in proc.stdout


def test_a_hook_added_inserts_a_call_hook_node(hook_added):
    code, doc = diff_json(str(hook_added), "0", "1")
    assert code == 1
    (c,) = doc["comparisons"]
    inserted = [ch["new"]["target"] for ch in c["changes"] if ch["kind"] == "inserted"]
    assert "call_hook" in inserted
    assert c["summary"]["hooks_added"] == ["tensor_pre_hook"]


def test_across_two_runs(op_loop, shape_loop):
    code, doc = diff_json(f"{op_loop}:0", f"{shape_loop}:0")
    assert code == 1
    (c,) = doc["comparisons"]
    assert (c["old"]["run"], c["new"]["run"]) == (str(op_loop), str(shape_loop))
    assert c["summary"]["autograd_nodes_removed"] == ["AddBackward0 (NodeCall 2)"]


def test_side_by_side_is_the_default(op_loop):
    proc = diff(str(op_loop), "0", "1")
    assert proc.returncode == 1, proc.stderr
    assert "!0 (old)" in proc.stdout and "!1 (new)" in proc.stdout
    assert "new autograd node SubBackward0 at NodeCall 2, step 1, op_loop.py:12" in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a terminal: no colour


def test_tensor_hook_sample_renders(record_run):
    run = record_run("tensor_hook.py")
    assert run.returncode == 0, run.stderr
    proc = diff(str(run.path), "-f", "unified")
    assert proc.returncode == 1, proc.stderr
    assert "call_hook(hooks[" in proc.stdout


# --- bad input: one clear line, exit 3 (2 for bad arguments) ------------------------------------------


def _one_error_line(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cagtool: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_unknown_graph_id(op_loop):
    _one_error_line(diff(str(op_loop), "0", "9"), 3, "has no graph 9", "0, 1, 2, 3")
    _one_error_line(diff(f"{op_loop}:7", f"{op_loop}:0"), 3, "has no graph 7")


def test_a_run_without_graphs(op_loop, tmp_path):
    run = tmp_path / "no_graphs"
    shutil.copytree(op_loop, run)
    shutil.rmtree(run / "ca" / "graphs")
    events = run / "ca" / "events.jsonl"
    events.write_text("".join(line + "\n" for line in events.read_text().splitlines() if '"kind": "ca_graph"' not in line))
    _one_error_line(diff(str(run)), 3, "has no compiled-autograd graphs")


def test_a_missing_and_a_corrupt_graph_file(op_loop, tmp_path):
    run = tmp_path / "damaged"
    shutil.copytree(op_loop, run)
    (run / "ca" / "graphs" / "ca_1.json").unlink()
    _one_error_line(diff(str(run), "0", "1"), 3, "graph 1", "missing")
    (run / "ca" / "graphs" / "ca_2.json").write_text("{not json")
    _one_error_line(diff(str(run), "2", "3"), 3, "not valid JSON")


def test_a_missing_run_and_bad_arguments(tmp_path):
    _one_error_line(diff(str(tmp_path / "nope")), 3, "no run at")
    _one_error_line(diff("0"), 2, "one graph given")
    _one_error_line(diff("a", "b", "c", "d"), 2, "too many arguments")


def test_a_run_with_one_graph_has_nothing_to_compare(op_loop, tmp_path):
    run = tmp_path / "one_graph"
    shutil.copytree(op_loop, run)
    for ca_id in (1, 2, 3):
        (run / "ca" / "graphs" / f"ca_{ca_id}.json").unlink()
    events = run / "ca" / "events.jsonl"
    keep = [line for line in events.read_text().splitlines() if not any(f'"ca_id": {i},' in line for i in (1, 2, 3))]
    events.write_text("".join(line + "\n" for line in keep))
    proc = diff(str(run))
    assert proc.returncode == 0, proc.stderr
    assert "has one compiled-autograd graph (!0)" in proc.stdout


def test_help_teaches():
    proc = diff("--help")
    assert proc.returncode == 0
    assert "Examples" in proc.stdout and "RUN_A:ID RUN_B:ID" in proc.stdout


def test_off_a_terminal_the_diff_is_unified_and_an_asked_for_table_folds_at_200_columns(op_loop):
    """In a pipe or a CI log with no COLUMNS a side-by-side table took the width of its longest
    node (6,225 characters a line in a real job): there the default is the unified diff, and a
    table asked for with -f side is folded at 200 columns."""
    piped = cagtool_in_process("diff-graphs", str(op_loop), "1", "2", env={"CI": "true"}, unset=("COLUMNS",))
    assert piped.returncode == 1, piped.stderr
    lines = piped.stdout.splitlines()
    assert any(line.startswith("-") and "SubBackward0" in line for line in lines)
    assert any(line.startswith("+") and "MulBackward0" in line for line in lines)
    assert not any(line[:1] in "┏┃│" for line in lines)
    table = cagtool_in_process("diff-graphs", str(op_loop), "1", "2", "-f", "side", env={"CI": "true"}, unset=("COLUMNS",))
    rows = [line for line in table.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table.returncode == 1 and rows and max(len(line) for line in rows) == 200
    wide = diff(str(op_loop), "1", "2")  # COLUMNS=120 asks for a table that wide
    assert max(len(line) for line in wide.stdout.splitlines() if line[:1] in "┏┃┡│└") == 120


def test_stat_prints_each_comparisons_header_and_summary_without_its_nodes(op_loop):
    """A seq2seq run's 9 graphs read 8,913 lines in full: -f stat gives each comparison's header
    and summary, what changed, in a screen; the exit code is diff's as in every format."""
    proc = diff(str(op_loop), "-f", "stat")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert sum(line.startswith("--- !") for line in lines) == 3 and sum(line.startswith("+++ !") for line in lines) == 3
    assert any(line.startswith("autograd nodes: +MulBackward0 (NodeCall 2), -SubBackward0 (NodeCall 2)") for line in lines), lines
    assert not any(line[:1] in "-+ " and "= " in line for line in lines if not line.startswith(("---", "+++")))
    full = diff(str(op_loop), "-f", "unified")
    assert len(lines) < len(full.stdout.splitlines())


def test_identical_graphs_of_a_cache_miss_say_the_miss_was_on_what_the_code_does_not_show(record_run):
    # two_forward_causes.py: the forward recompiled at step 1 (an attribute its first call set), so the
    # backward meets another CompiledFunctionBackward of the same ops: !1's code is !0's.
    run = record_run("../tests/scripts/two_forward_causes.py", backend="aot_eager")
    assert run.returncode == 0, run.stderr[-2000:]
    proc = cagtool_in_process("diff-graphs", str(run.path), "0", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("identical: "))
    assert lines[at + 1].startswith("the cache miss that captured !1 was on the key of CompiledFunctionBackward"), lines


def test_the_same_code_captured_again_when_sizes_became_dynamic_is_not_identical(record_run):
    # padded_sequences.py: the forward, recompiled with a dynamic length at step 1, has a new backward
    # (!1); at step 2 the length changed again and two sizes of that backward's cache key became
    # dynamic (!2: "2 changed tensor shapes (total of 4): sizes[2], sizes[3]"). No node reads them:
    # !2's code is !1's, and !2 is still another graph (it takes lengths !1 was not captured for).
    run = record_run("../tests/scripts/padded_sequences.py")
    assert run.returncode == 0, run.stderr[-2000:]
    proc = diff(str(run.path), "1", "2", "-f", "unified")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert not any(line.startswith("identical") for line in lines), lines
    at = next(i for i, line in enumerate(lines) if line.startswith("same code, not the same graph: "))
    sizes = lines[at + 1]
    assert sizes.startswith("sizes that became dynamic (symbolic) between !1 and !2: sizes[2]=9, sizes[3]=9 of CompiledFunctionBackward"), lines
    assert sizes.endswith("at the cache miss that captured !2 (step 2); 4 sizes are dynamic for !2 (torch's count), its code reads 2"), sizes
    code, doc = diff_json(str(run.path), "1", "2")
    (c,) = doc["comparisons"]
    assert code == 1 and doc["identical"] is False and c["identical"] is False and c["same_code"] is True
    assert c["sizes"]["old"]["captured_for"] == "new_node" and c["sizes"]["new"]["captured_for"] == "changed_shapes"
    assert [s["index"] for s in c["sizes"]["new"]["became_dynamic"]] == [2, 3] and c["sizes"]["new"]["dynamic_sizes"] == 4
    # Each graph file keeps its symbols' values in that capture: the same code, captured for a length
    # of 12 and then 9, shows which inputs held which sizes (the symbols' names alike on both sides).
    values = [json.loads((run.path / "ca" / "graphs" / f"ca_{i}.json").read_text())["symbols"] for i in (1, 2)]
    assert 12 in values[0].values() and 9 in values[1].values() and 12 not in values[1].values(), values
    assert c["summary"]["resized"] == 4 and c["summary"]["changed"] == 4, c["summary"]
    assert any(line.endswith("# changed: shape [4, 12] -> [4, 9], stride [12, 1] -> [9, 1]") for line in lines), lines
    assert diff(str(run.path), "2", "1", "-f", "stat").returncode == 1  # either way round
    assert diff(f"{run.path}:2", f"{run.path}:2", "-f", "stat").returncode == 0  # a graph is its own
