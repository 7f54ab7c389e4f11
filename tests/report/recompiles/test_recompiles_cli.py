"""`cagtool recompiles` end to end on real records of the sample scripts (recorded once per session
by the `record_run` fixture: `cagtool run --modes ca --backend eager -o DIR sample_scripts/X.py`),
plus the bad-input contract: one clear line on stderr and exit code 3.

Golden texts are the real CLI's output on a 100-column colourless console (not a TTY), with the
run directory written RUN and event seqs written N, so they do not depend on temp paths or on how
many events the capture writes before a miss.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import OP_LOOP_INSPECT_RECOMPILES as INSPECT_RECOMPILES
from conftest import ROOT, cli_in_process

pytestmark = pytest.mark.slow


def cagtool(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI's own entry point in this process: `recompiles` only reads a record, and a new
    interpreter per call would cost ~0.6 s of CPU starting Python and importing cagtool."""
    code, out, err = cli_in_process(*args, env={"CI": "true", "COLUMNS": "100", **(env or {})}, cwd=cwd, unset=("FORCE_COLOR",))
    return subprocess.CompletedProcess(["cagtool", *args], code, out, err)


def recorded(record_run, script: str, *extra: str) -> Path:
    run = record_run(script, extra=tuple(extra))
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


def explain_json(run: Path) -> dict:
    proc = cagtool("recompiles", str(run), "--explain", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["modes"]["ca"]


def normalised(text: str, run: Path) -> str:
    text = text.replace(str(run), "RUN")
    text = re.sub(r"seq \d+", "seq N", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def raw_events(run: Path, kind: str) -> list[dict]:
    lines = (run / "ca" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


# -- golden explanations ---------------------------------------------------------------------------

GOLDEN_OP_LOOP = """\
mode ca: 3 recompiles in 4 steps (CA: 3, Dynamo forward-frame: 0, Dynamo CA-graph: 0); initial
  compile !0 at step 0

!! Recompile storm: recompiles on every step after the first
  3 recompiles on steps 1-3 of 0-3; each one costs a compile (and, for compiled autograd, a
    capture) inside the training step.
  Still recompiling at the last recorded step.
  Fix: Fix cause #1 below; the storm ends when that cause does.
  Evidence: steps 1-3

#1 The autograd graph's structure changes between iterations (3 recompiles), steps 1-3
  Compiled autograd caches one graph per graph structure; a backward whose graph has different
    nodes is a cache miss and a new capture. Seen 4 distinct structures in the backward called at
    sample_scripts/op_loop.py:12  torch.compile(lambda: loss.backward(), backend="eager")().
  The node that differs: !1 step 1: NodeCall 2 AddBackward0 -> SubBackward0, !2 step 2: NodeCall 2
    SubBackward0 -> MulBackward0, !3 step 3: NodeCall 2 MulBackward0 -> DivBackward0.
  The same position holds different ops (NodeCall 2: AddBackward0 / SubBackward0 / MulBackward0 /
    DivBackward0): a Python branch or an op picked per step.
  It has not stabilised: still recompiling at the last recorded step (3).
  Fix: Make the backward graph the same every step: use the same ops every step (select results
    with torch.where instead of choosing ops in Python).
  Fix: If the variation is by design, compiled autograd will keep recompiling: run that part
    without it (torch._dynamo.compiled_autograd._disable()).
  Evidence: !1 (step 1, seq N), !2 (step 2, seq N), !3 (step 3, seq N)

recompile budget:
  compiled-autograd graphs: 4 (torch sets no limit on them), 1 per step; still capturing new graphs
    in its last step
  The job did not reach a steady state: compiled autograd still capturing at its last step (3); its
    steady step time is not a steady figure.

Every recompile, one per row: cagtool recompiles RUN"""

GOLDEN_BRANCH = """\
mode ca: 1 recompile in 6 steps (CA: 1, Dynamo forward-frame: 0, Dynamo CA-graph: 0); initial
  compile !0 at step 0

#1 The autograd graph's structure changes between iterations (1 recompile), step 1
  Compiled autograd caches one graph per graph structure; a backward whose graph has different
    nodes is a cache miss and a new capture. Seen 2 distinct structures created at
    sample_scripts/branching_model.py:21  h = torch.tanh(h).
  The node that differs: !1 step 1: NodeCall 5 ReluBackward0 -> TanhBackward0.
  The same position holds different ops (NodeCall 5: ReluBackward0 / TanhBackward0): a Python
    branch or an op picked per step.
  It has stabilised: no new structure after step 1; the last 4 steps reused cached graphs.
  Nothing urgent: each distinct structure is captured once and then reused.
  Fix: If a data-dependent branch picks the ops, computing both sides and selecting with
    torch.where keeps a single graph.
  Evidence: !1 (step 1, seq N)

Every recompile, one per row: cagtool recompiles RUN"""

GOLDEN_HOOK = """\
mode ca: 1 recompile in 5 steps (CA: 1, Dynamo forward-frame: 0, Dynamo CA-graph: 0); initial
  compile !0 at step 0

#1 A backward hook was added or removed during the run (1 recompile), step 2
  The key of AccumulateGrad (NodeCall 5) changed (key size 24, previous 22): hooks are part of the
    graph compiled autograd caches, so a new set of hooks is a new graph.
  Hooks per graph: !1 at step 2: added tensor_pre_hook (vs !0).
  It has stabilised: no hook change after step 2; the last 2 steps reused cached graphs.
  The lambda at sample_scripts/hook_added_midrun.py:16 (in `main`)
    (`model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))`), a tensor hook
    (`register_hook`), is registered on step 2.
  Removing a hook returns to an already cached graph (no recompile); adding a new one costs a
    capture each time.
  Fix: Register the lambda at sample_scripts/hook_added_midrun.py:16 (in `main`) once, before the
    first backward, and keep it. A hook meant to act only from some step on: switch what it does
    with a tensor it reads (a clamp bound that is inf until then, set with `bound.fill_(...)`), not
    with a Python flag: compiled autograd traces the hook, and Dynamo guards a flag it reads, so
    flipping the flag recompiles the backward too.
  Evidence: !1 (step 2, seq N)

Every recompile, one per row: cagtool recompiles RUN"""


@pytest.mark.parametrize(
    "script, extra, golden",
    [
        ("op_loop.py", (), GOLDEN_OP_LOOP),
        ("branching_model.py", ("--trace-nodes",), GOLDEN_BRANCH),
        ("hook_added_midrun.py", (), GOLDEN_HOOK),
    ],
    ids=["op_loop", "branching_model", "hook_added_midrun"],
)
def test_golden_explanation(record_run, script, extra, golden):
    if script == "op_loop.py" and INSPECT_RECOMPILES:
        pytest.skip("the golden text is torch 2.13's: 2.14 adds its own frames' cause (test_op_loop_counts_match_the_record counts it)")
    run = recorded(record_run, script, *extra)
    proc = cagtool("recompiles", str(run), "--explain")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert normalised(proc.stdout, run) == golden


# -- root causes, counts and source lines on real records --------------------------------------------

def test_op_loop_counts_match_the_record(record_run):
    run = recorded(record_run, "op_loop.py")
    mode = explain_json(run)
    misses = raw_events(run, "ca_cache_miss")
    assert mode["counts"]["ca_cache_misses"] == len(misses) == 4 and mode["counts"]["ca_recompiles"] == 3
    # compiles by phase: a CA graph once, its capture (Dynamo's compile of its code is that graph)
    assert mode["phases"]["counts"]["ca_graph"] == len(raw_events(run, "ca_graph")) == 4
    assert len([e for e in raw_events(run, "dynamo_compile") if e["is_ca_graph"]]) == 4
    assert mode["initial"][0]["node"] == "torch::autograd::GraphRoot"
    ca_rows = [r for r in mode["recompiles"] if r["node"] is not None]
    assert len(mode["recompiles"]) - len(ca_rows) == mode["counts"]["dynamo_frame_recompiles"] == INSPECT_RECOMPILES
    assert [(r["node"], r["node_call"], r["step"]) for r in ca_rows] == [
        ("SubBackward0", 2, 1), ("MulBackward0", 2, 2), ("DivBackward0", 2, 3)  # the loop's iterations 1-3 over sub, mul, div
    ]
    assert [r["key_size"] for r in ca_rows] == [m["key_size"] for m in misses[1:]]
    (cause,) = [c for c in mode["explanation"]["causes"] if not c["inside_capture"]]
    assert len(mode["explanation"]["causes"]) == 1 + bool(INSPECT_RECOMPILES)
    assert (cause["code"], cause["count"], cause["steps"], cause["stabilised"]) == ("graph_structure", 3, [1, 2, 3], False)
    assert cause["source"]["file"] == "sample_scripts/op_loop.py" and cause["source"]["line"] == 12


def test_shape_loop_changed_shapes_then_dynamic(record_run):
    run = recorded(record_run, "shape_loop.py")
    mode = explain_json(run)
    assert mode["counts"]["ca_cache_misses"] == len(raw_events(run, "ca_cache_miss")) == 2
    shape_rows = [r for r in mode["recompiles"] if r["kind"] == "changed_shapes"]
    assert len(shape_rows) == 1 and shape_rows[0]["step"] == 1  # the second iteration, size 100
    assert {(c["node"], c["value"]) for c in shape_rows[0]["changed_sizes"]} == {("SumBackward0", 100)}
    causes = mode["explanation"]["causes"]
    assert causes[0]["code"] == "changed_shapes"
    # Dynamo's recompile of that graph is the same cause (torch 2.14's own frames inside the captures are another)
    assert causes[0]["count"] == mode["counts"]["recompiles"] - sum(c["count"] for c in causes if c["inside_capture"])
    # A CA graph's sizes: compiled autograd started dynamic is the fix, not marking the model's
    # inputs (its first graph takes its nodes' sizes as constants whatever the forward did).
    fix = " ".join(causes[0]["fix"])
    assert "Start compiled autograd dynamic" in fix and "`cagtool run --dynamic`" in fix and "mark_dynamic" not in fix
    assert mode["explanation"]["alerts"] == []


def test_storm_script_storm_and_recompile_limit_first(record_run):
    run = recorded(record_run, "recompile_storm.py")
    mode = explain_json(run)
    alerts = mode["explanation"]["alerts"]
    assert [a["code"] for a in alerts] == ["recompile_limit", "recompile_storm"]
    assert alerts[0]["title"] == "Dynamo hit config.recompile_limit (4) and fell back to eager"
    assert alerts[1]["facts"]["every_step"] is True
    causes = {c["code"]: c for c in mode["explanation"]["causes"]}
    structure = causes["graph_structure"]
    assert structure["count"] == 5 and structure["steps"] == [1, 2, 3, 4, 5]  # every step of range(6) after the first
    guard = causes["dynamo_guard_failure"]
    assert guard["count"] == 4 and guard["steps"] == [1, 2, 3, 4]  # 0/1..0/4; 0/4 is the one that hit the limit
    assert guard["number"] in alerts[0]["causes"]
    assert guard["source"]["file"] == "sample_scripts/recompile_storm.py" and guard["source"]["line"] == 14
    assert guard["source"]["code"].startswith("for _ in range(depth):")
    assert "depth == " in " ".join(guard["why"])
    assert mode["counts"]["ca_cache_misses"] == len(raw_events(run, "ca_cache_miss")) == 6
    compile_ids = {e["compile_id"] for e in raw_events(run, "dynamo_recompile")}
    compile_ids |= {e["compile_id"] for e in raw_events(run, "dynamo_compile") if not e["compile_id"].endswith("/0")}
    assert mode["counts"]["dynamo_frame_recompiles"] + mode["counts"]["dynamo_ca_graph_recompiles"] == len(compile_ids)
    # 0/4 is in torch's recompiles log (its reasons are logged before the limit is checked) and
    # compiled nothing: the count line says which of them were refused.
    code, text, _ = cli_in_process("recompiles", str(run))
    assert "1 of them refused at the recompile limit, compiling nothing" in text.splitlines()[0]


def test_branching_model_names_the_branch_line(record_run):
    run = recorded(record_run, "branching_model.py", "--trace-nodes")
    (cause,) = explain_json(run)["explanation"]["causes"]
    assert cause["code"] == "graph_structure" and cause["stabilised"] is True
    assert (cause["source"]["line"], cause["source"]["code"], cause["source"]["how"]) == (21, "h = torch.tanh(h)", "node_traceback")


def test_hook_added_midrun(record_run):
    run = recorded(record_run, "hook_added_midrun.py")
    mode = explain_json(run)
    (cause,) = mode["explanation"]["causes"]
    assert (cause["code"], cause["steps"], cause["count"]) == ("hook_changed", [2], 1)  # the script's `if step == 2`
    assert mode["recompiles"][0]["node"] == "torch::autograd::AccumulateGrad"


def test_table_lists_the_initial_compile_and_every_recompile(record_run):
    run = recorded(record_run, "op_loop.py")
    proc = cagtool("recompiles", str(run))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"mode ca: {3 + INSPECT_RECOMPILES} recompiles in 4 steps (CA: 3, Dynamo forward-frame: {INSPECT_RECOMPILES},")
    rows = [line.split() for line in lines if re.match(r"^ +(-|\d+) +\d+ +CA miss", line)]
    assert [(r[1], r[4]) for r in rows] == [("0", "!0"), ("1", "!1"), ("2", "!2"), ("3", "!3")]  # step, CA graph
    # the recompiles' numbers (torch 2.14's own frames take numbers between them)
    assert [r[0] for r in rows][:1 if INSPECT_RECOMPILES else None] == ["-", "1", "2", "3"][:1 if INSPECT_RECOMPILES else None]
    assert "initial" in rows[0] and all("new" in r for r in rows[1:])
    assert '  sample_scripts/op_loop.py:12  torch.compile(lambda: loss.backward(), backend="eager")()' in lines
    assert lines[-1] == f"Why, and what to do: cagtool recompiles {run} --explain"


# -- bad input ----------------------------------------------------------------------------------------

def assert_one_line_exit_3(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cagtool: error: ") and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0]


def copy_run(record_run, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(recorded(record_run, "op_loop.py"), target)
    return target


def test_no_run_yet(tmp_path):
    proc = cagtool("recompiles", "--explain", cwd=tmp_path, env={"CAGTOOL_RUNS_DIR": str(tmp_path / "runs")})
    assert_one_line_exit_3(proc, "no runs recorded yet", "cagtool run")


def test_missing_run_path(tmp_path):
    assert_one_line_exit_3(cagtool("recompiles", str(tmp_path / "nope")), "no run at")


def test_verify_options_without_verify_are_a_usage_error_not_ignored(tmp_path):
    """`--fix` or `--rerun-timeout` without `--verify` re-run nothing: said in one line, exit 2,
    before any record is read (here there is none)."""
    for given in (("--fix", "torch-pgo"), ("--rerun-timeout", "30")):
        code, out, err = cli_in_process("recompiles", str(tmp_path / "nope"), *given)
        assert code == 2 and out == "", err
        assert err.strip() == f"cagtool: error: {given[0]} applies to --verify's re-runs: add --verify (nothing is re-run without it)"


def test_truncated_record_is_read_leniently_and_fails_with_strict(record_run, tmp_path):
    run = copy_run(record_run, tmp_path)
    events = run / "ca" / "events.jsonl"
    text = events.read_text()
    events.write_text(text[: len(text) - 40])  # the process died while writing the last line
    manifest = json.loads((run / "ca" / "manifest.json").read_text())
    manifest["status"] = "running"
    (run / "ca" / "manifest.json").write_text(json.dumps(manifest))
    lenient = cagtool("recompiles", str(run), "--explain")
    assert lenient.returncode == 0, lenient.stderr
    assert "note: skipped 1 unreadable line of the ca record (--strict makes this an error)" in lenient.stdout
    assert "3 recompiles in 4 steps" in lenient.stdout
    as_json = cagtool("recompiles", str(run), "--format", "json")
    assert json.loads(as_json.stdout)["modes"]["ca"]["skipped_lines"] == 1
    assert "skipped 1 unreadable line" in as_json.stderr
    assert_one_line_exit_3(cagtool("recompiles", str(run), "--strict"), "is not a JSON object (--strict)")


def test_garbage_manifest(record_run, tmp_path):
    run = copy_run(record_run, tmp_path)
    (run / "ca" / "manifest.json").write_text("\x00garbage{")
    assert_one_line_exit_3(cagtool("recompiles", str(run)), "not valid JSON")


def test_newer_schema(record_run, tmp_path):
    run = copy_run(record_run, tmp_path)
    meta = json.loads((run / "run.json").read_text())
    meta["schema_version"] = 99
    (run / "run.json").write_text(json.dumps(meta))
    assert_one_line_exit_3(cagtool("recompiles", str(run), "--explain"), "newer than this cagtool reads", "upgrade cagtool")


def test_mode_option(record_run, tmp_path):
    run = recorded(record_run, "hook_added_midrun.py")
    proc = cagtool("recompiles", str(run), "--mode", "ca", "--format", "json")
    assert proc.returncode == 0 and list(json.loads(proc.stdout)["modes"]) == ["ca"]
    assert_one_line_exit_3(cagtool("recompiles", str(run), "--mode", "aot"), "has no mode 'aot'")
    # No mode cagtool records at all: the argument is wrong (a usage error), not the run.
    bogus = cagtool("recompiles", str(run), "--mode", "bogus")
    assert bogus.returncode == 2 and bogus.stderr.strip() == (
        f"cagtool: error: --mode: expected one of eager, aot, ca, imported, got 'bogus' (run {run} has: ca)"), bogus.stderr


def test_run_with_no_mode_records(record_run, tmp_path):
    run = copy_run(record_run, tmp_path)
    shutil.rmtree(run / "ca")
    assert_one_line_exit_3(cagtool("recompiles", str(run)), "has no mode records")


def test_help_teaches():
    proc = cagtool("recompiles", "--help")
    assert proc.returncode == 0
    for phrase in ("--explain", "initial compile", "!N/F/C", "--format", "cagtool-recompiles"):
        assert phrase in proc.stdout, phrase


# -- the fast lenient reader agrees with the one loader -----------------------------------------------

def _tables_agree(run: Path) -> None:
    from cagtool.record.loader import load_run
    from cagtool.report.recompiles.table import load_filtered, recompile_table

    full = load_run(run)
    filtered, steps = load_filtered(run)
    for name, mode in full.modes.items():
        a, b = recompile_table(mode), recompile_table(filtered.modes[name], steps[name])
        assert (a.rows, a.steps, a.last_step, a.limit_hits, a.skipped_lines, a.unknown_kinds) == (
            b.rows, b.steps, b.last_step, b.limit_hits, b.skipped_lines, b.unknown_kinds
        )


@pytest.mark.parametrize("script", ["op_loop.py", "shape_loop.py", "recompile_storm.py", "hook_added_midrun.py"])
def test_filtered_reader_matches_the_loader(record_run, script):
    _tables_agree(recorded(record_run, script))


def test_filtered_reader_matches_the_loader_on_damaged_records(record_run, tmp_path):
    run = copy_run(record_run, tmp_path)
    events = run / "ca" / "events.jsonl"
    lines = events.read_text().splitlines()
    step_line = next(i for i, line in enumerate(lines) if '"kind": "step"' in line)
    lines.insert(step_line, '{"kind": "from_the_future", "seq": 999, "t": 0}')
    lines.insert(0, "not json at all")
    lines[-1] = lines[-1][:25]  # truncated
    events.write_text("\n".join(lines) + "\n")
    _tables_agree(run)
    from cagtool.report.recompiles.table import load_filtered

    filtered, _ = load_filtered(run)
    assert filtered.modes["ca"].skipped_lines == 2
    assert dict(filtered.modes["ca"].unknown_kinds) == {"from_the_future": 1}


# -- the columns sidecar: a closed record is read without scanning its step lines --------------------

def _explained(run: Path) -> tuple[str, str]:
    """`recompiles RUN --explain` as text (100 columns) and as JSON, in-process."""
    import io

    from cagtool.commands.recompiles import RecompilesOptions, run_recompiles

    texts = []
    for fmt in ("text", "json"):
        out = io.StringIO()
        assert run_recompiles(RecompilesOptions(run=str(run), explain=True, format=fmt, width=100), out, io.StringIO()) == 0
        texts.append(out.getvalue())
    return texts[0], texts[1]


def test_a_closed_record_is_read_through_its_sidecar_without_scanning_the_lines(record_run, tmp_path, monkeypatch):
    from cagtool.record import loader
    from cagtool.record.columns import COLUMNS_FILE

    run = tmp_path / "storm"
    shutil.copytree(recorded(record_run, "recompile_storm.py"), run)
    assert (run / "ca" / COLUMNS_FILE).is_file()  # the writer left one when the mode closed its record
    sidecar = run / "ca" / COLUMNS_FILE
    kept = sidecar.read_bytes()
    sidecar.unlink()  # as a killed run leaves the record: read line by line
    expected = _explained(run)
    sidecar.write_bytes(kept)

    def scanned(*args, **kwargs):
        raise AssertionError("the step lines were scanned although the sidecar matches")

    monkeypatch.setattr(loader, "_stream_lines", scanned)
    assert _explained(run) == expected  # same text and JSON, step count included
    steps = json.loads(expected[1])["modes"]["ca"]["steps"]
    assert steps > 1 and f"in {steps} steps" in expected[0].splitlines()[0]


def test_a_stale_sidecar_is_ignored_and_the_lines_are_read(record_run, tmp_path):
    run = tmp_path / "storm"
    shutil.copytree(recorded(record_run, "recompile_storm.py"), run)
    before = json.loads(_explained(run)[1])["modes"]["ca"]
    events = run / "ca" / "events.jsonl"
    last_step = [line for line in events.read_text().splitlines() if line.startswith('{"kind": "step"')][-1]
    with events.open("a") as handle:  # appended after the sidecar was written: it no longer matches
        handle.write(last_step + "\n" + "not json\n")
    after = json.loads(_explained(run)[1])["modes"]["ca"]
    assert after["steps"] == before["steps"] + 1
    assert after["skipped_lines"] == before["skipped_lines"] + 1
    assert after["counts"] == before["counts"]


def test_each_repetition_of_a_repeated_run_is_its_own_table_under_its_own_name(record_run, tmp_path):
    """`run --repeat 7` (the gate-copy tests' recording): every repetition is explained and kept in
    the JSON under its record's name (`eager.2` ...), never folded into one `eager` key whose last
    repetition wins, and `--mode eager.3` names that repetition, not its mode."""
    run = record_run("mlp_steps.py", "--steps", "40", modes="eager", backend="eager", extra=("--repeat", "7"))
    assert run.returncode == 0, run.stderr[-2000:]
    proc = cagtool("recompiles", str(run.path), "--explain", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    modes = json.loads(proc.stdout)["modes"]
    names = ["eager", *(f"eager.{k}" for k in range(2, 8))]
    assert list(modes) == names
    assert all(entry["mode"] == "eager" and entry["steps"] == 40 and "explanation" in entry for entry in modes.values())
    text = cagtool("recompiles", str(run.path), "--explain").stdout
    heads = [line for line in text.splitlines() if line.startswith("mode ")]
    assert [line.split(":")[0] for line in heads] == [f"mode {n}" for n in names]
    # Repetitions that say word for word what the first said are one line each, pointing to it.
    assert not heads[0].endswith("above, word for word") and text.count("No recompiles: the eager mode compiles nothing.") == 1
    flat = " ".join(text.split())
    for name in names[1:]:
        assert (f"mode {name}: 0 recompiles in 40 steps (CA: 0, Dynamo forward-frame: 0, Dynamo CA-graph: 0); "
                "explained as mode eager above, word for word") in flat, flat
    one = cagtool("recompiles", str(run.path), "--mode", "eager.3")
    assert one.returncode == 0 and one.stdout.startswith("mode eager.3: 0 recompiles in 40 steps"), one.stdout[:300]
    # --verify of a repetition explains that repetition and would re-run its mode (`run --modes eager`), not "eager.3".
    copy = shutil.copytree(run.path, tmp_path / "run")
    verified = cagtool("recompiles", str(copy), "--explain", "--verify", "--repeat", "1", "--mode", "eager.3")
    assert verified.returncode == 0, verified.stderr
    assert "nothing to verify in mode eager: no fix cagtool can apply answers these causes" in verified.stderr, verified.stderr


def test_torchs_pgo_line_is_shown_whole_up_to_eight_sources_and_cut_with_a_count_beyond():
    from cagtool.torch_text import pgo_shown

    few = 'PGO detected a recompilation due to dynamic shapes. ... TORCH_COMPILE_DYNAMIC_SOURCES="L[\'tokens\'],L[\'mask\']"'
    assert pgo_shown(few, "ca") == few
    many = 'set environment variable TORCH_COMPILE_DYNAMIC_SOURCES="' + ",".join(f"L['sizes'][{i}]" for i in range(40)) + '" now'
    shown = pgo_shown(many, "ca")
    assert shown.startswith('set environment variable TORCH_COMPILE_DYNAMIC_SOURCES="L[\'sizes\'][0],')
    assert "L['sizes'][5],...\" now [cagtool: 34 more of 40 sources not shown" in shown and "L['sizes'][6]" not in shown


def test_a_failed_fixs_figures_are_said_to_be_what_it_recorded_before_it_stopped():
    from cagtool.report.recompiles.verification import verification_lines

    side = {"ca_recompiles": [3], "dynamo_recompiles": [1], "ca_graphs": [4], "hook_calls": [None], "compile_time_s": 2.0,
            "first_step_s": 3.0, "peak_memory_bytes": 2**28, "run": "/r/verify/x/fix"}
    stopped = {**side, "ca_recompiles": [0], "dynamo_recompiles": [0], "ca_graphs": [1]}
    fix = {"fix": "ca-dynamic", "causes": [1], "title": "t", "who": "run configuration", "env": {}, "run_flags": ["--dynamic"],
           "measured": stopped, "verdict": "failed", "reasons": ["the re-run with the fix did not finish: see its record"]}
    data = {"mode": "ca", "repeat": 1, "baseline": side, "fixes": [fix], "not_applied": []}
    [counts] = [line for line in verification_lines(data) if "CA recompiles 3 -> 0" in line]
    assert counts.strip().startswith("what the failed re-run recorded before it stopped (not a measure of the fix): CA recompiles 3 -> 0")
    fix["verdict"] = "verified"
    [counts] = [line for line in verification_lines(data) if "CA recompiles 3 -> 0" in line]
    assert counts.strip().startswith("CA recompiles 3 -> 0")


def test_torchs_pgo_suggestion_is_said_once_however_many_fixes_carry_it():
    """Each dynamic fix keeps torch's PGO line (verification.json); the text says it once, above
    the fixes, where it read four times, once under each."""
    from cagtool.report.recompiles.verification import verification_lines

    side = {"ca_recompiles": [2], "dynamo_recompiles": [2], "ca_graphs": [3], "hook_calls": [None], "compile_time_s": 2.0,
            "first_step_s": 3.0, "peak_memory_bytes": 2**28, "run": "/r/verify/x/fix"}
    says = "PGO detected a recompilation due to dynamic shapes. To reduce shape recompilations ..."
    fixes = [{"fix": name, "causes": [1], "title": "t", "who": "run configuration", "env": {}, "run_flags": ["--dynamic"],
              "measured": side, "verdict": "verified", "reasons": ["recompiles 4 -> 1"], "torch_says": says}
             for name in ("ca-dynamic", "torch-pgo", "dynamic-sources")]
    lines = verification_lines({"mode": "ca", "repeat": 3, "baseline": side, "fixes": fixes, "not_applied": []})
    pgo = [i for i, line in enumerate(lines) if "PGO detected" in line]
    first_fix = next(i for i, line in enumerate(lines) if line.startswith("  ca-dynamic (cause #1)"))
    assert len(pgo) == 1 and pgo[0] < first_fix, lines
