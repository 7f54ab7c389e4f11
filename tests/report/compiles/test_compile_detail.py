"""Per compile id, what tlparse shows (the stack, the Dynamo graph, the AOT graphs, the guards):
recorded by `cagtool run` from its Dynamo taps, read back by `cagtool compile`, named by `summary`
and `diff-graphs`. On a real run of sample_scripts/ragged_batches.py (a Dynamo recompile for the
last, smaller batch, and compiled-autograd recompiles)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import ARTIFACT_AOT_BACKWARD, ARTIFACT_AOT_FORWARD, ARTIFACT_DYNAMO_GRAPH, ARTIFACT_GUARDS, ARTIFACT_STACK, DynamoCompileEvent, DynamoRecompileEvent
from cagtool.report.compiles.detail import compile_details, parse_compile_id
from cagtool.errors import UsageError


@pytest.fixture(scope="module")
def ragged(record_run):
    run = record_run("ragged_batches.py")
    assert run.returncode == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def graph_breaks(record_run):
    """A forward compiled with aot_eager: AOTAutograd makes a forward and a backward graph."""
    run = record_run("graph_breaks.py", "3")  # served by the session's three-mode recording
    assert run.returncode == 0, run.stderr
    return run


def test_every_compile_torch_reported_has_its_stack_graph_and_guards(ragged):
    ca = load_run(ragged.path).mode("ca")
    compiled = [c.compile_id for c in ca.of(DynamoCompileEvent) if c.graph_op_count]
    details = {d.compile_id: d for d in compile_details(ca)}
    assert compiled and set(compiled) <= set(details)
    for cid in compiled:
        names = [a.artifact for a in details[cid].artifacts]
        assert names[:2] == [ARTIFACT_STACK, ARTIFACT_DYNAMO_GRAPH] and ARTIFACT_GUARDS in names, (cid, names)
    recompile = ca.of(DynamoRecompileEvent)[0]
    detail = details[recompile.compile_id]
    assert detail.reasons == recompile.reasons
    stack = ca.artifact_text(detail.artifact(ARTIFACT_STACK))
    # Where the compile came from, outermost first, down to the user's call of the model; cagtool's runner is not in it.
    assert stack.startswith('  File "') and "ragged_batches.py" in stack and "model(x)" in stack
    assert "cagtool/capture/run" not in stack and "runpy" not in stack
    guards = ca.artifact_text(detail.artifact(ARTIFACT_GUARDS))
    assert "TREE_GUARD_MANAGER" in guards and "TENSOR_MATCH" in guards
    assert "class GraphModule" in ca.artifact_text(detail.artifact(ARTIFACT_DYNAMO_GRAPH))


def test_aot_graphs_of_a_compile_are_recorded(graph_breaks):
    for mode in ("aot", "ca"):
        record = load_run(graph_breaks.path).mode(mode)
        forward = [d for d in compile_details(record) if not d.compile_id.startswith("!")]
        with_aot = [d for d in forward if d.artifact(ARTIFACT_AOT_FORWARD) and d.artifact(ARTIFACT_AOT_BACKWARD)]
        assert with_aot, (mode, [(d.compile_id, [a.artifact for a in d.artifacts]) for d in forward])
        backward = record.artifact_text(with_aot[0].artifact(ARTIFACT_AOT_BACKWARD))
        assert "class GraphModule" in backward and "tangents_1" in backward


def test_compile_command_text_json_and_bad_input(ragged):
    ca = load_run(ragged.path).mode("ca")
    cid = ca.of(DynamoRecompileEvent)[0].compile_id
    proc = cagtool_in_process("compile", str(ragged.path), f"[{cid}]")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"compile [{cid}] at step ")
    assert "--- stack (compiles/" in proc.stdout and "--- guards (" in proc.stdout and "TREE_GUARD_MANAGER" in proc.stdout
    proc = cagtool_in_process("compile", str(ragged.path), cid, "--format", "json", "--show", ARTIFACT_STACK)
    data = json.loads(proc.stdout)
    assert data["compile_id"] == cid and "text" in data["artifacts"][ARTIFACT_STACK] and "text" not in data["artifacts"][ARTIFACT_GUARDS]
    bad = cagtool_in_process("compile", str(ragged.path), "not-an-id")
    assert bad.returncode == 2 and "not a compile id" in bad.stderr and "Traceback" not in bad.stderr
    missing = cagtool_in_process("compile", str(ragged.path), "9/9")
    assert missing.returncode == 3 and "no compile [9/9]" in missing.stderr
    unknown = cagtool_in_process("compile", str(ragged.path), cid, "--show", "bytecode")
    assert unknown.returncode == 2 and "unknown artifact 'bytecode'" in unknown.stderr
    nothing = cagtool_in_process("compile", str(ragged.path / "nowhere"), cid)
    assert nothing.returncode == 3 and "Traceback" not in nothing.stderr


def test_a_recompile_on_a_python_value_reads_as_its_guard_and_the_line_that_installed_it(record_run):
    """torch appends the user stack to a value guard's reason ("User stack trace:" and the frames)
    and comments the guard with a path it cut: the page says the guard and the job's line, one line."""
    run = record_run("scalar_per_step.py", "4", "aot_eager")  # the session's recording
    assert run.returncode == 0, run.stderr[-2000:]
    ca = load_run(run.path).mode("ca")
    recompile = next(r for r in ca.of(DynamoRecompileEvent) if "User stack trace" in "".join(r.reasons))
    proc = cagtool_in_process("compile", str(run.path), recompile.compile_id, "--show", ARTIFACT_STACK)
    assert proc.returncode == 0, proc.stderr
    because = [line for line in proc.stdout.splitlines() if "recompiled because" in line]
    assert because and all("User stack trace" not in line and "\\n" not in line for line in because), because
    assert any("(guarded at " in line and "scalar_per_step.py:" in line for line in because), because


def test_a_planted_symlink_or_a_lost_file_is_refused_in_one_line(ragged, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ragged.path, run)
    ca = load_run(run).mode("ca")
    cid = ca.of(DynamoRecompileEvent)[0].compile_id
    guards = run / "ca" / compile_details(ca)[0].artifact(ARTIFACT_GUARDS).file
    detail = next(d for d in compile_details(ca) if d.compile_id == cid)
    target = run / "ca" / detail.artifact(ARTIFACT_GUARDS).file
    outside = tmp_path / "secret.txt"
    outside.write_text("SECRET")
    # The compile's folder replaced by a link to a folder outside the record: refused, nothing read.
    shutil.rmtree(target.parent)
    os.symlink(tmp_path, target.parent)
    proc = cagtool_in_process("compile", str(run), cid, "--show", ARTIFACT_GUARDS)
    assert proc.returncode == 3 and f"{target.parent} is a symbolic link; a record's files are read only as regular files, never through a link" in proc.stderr and "SECRET" not in proc.stdout
    guards.unlink()
    first = compile_details(ca)[0].compile_id
    proc = cagtool_in_process("compile", str(run), first, "--show", ARTIFACT_GUARDS)
    assert proc.returncode == 3 and "compile artifact" in proc.stderr and "Traceback" not in proc.stderr


def test_summary_and_diff_graphs_name_the_command(ragged):
    summary = cagtool_in_process("summary", str(ragged.path))
    assert f"per compile (stack, graphs, guards): cagtool compile {ragged.path} 0/1" in summary.stdout + summary.stderr
    diff = cagtool_in_process("diff-graphs", str(ragged.path))
    assert "'s compiles (stack, graphs, guards): cagtool compile " in diff.stdout


@pytest.mark.parametrize("text, parsed", [("0/1", "0/1"), ("[0/1]", "0/1"), ("!0/1/0", "!0/1/0"), ("[!2/3/1]", "!2/3/1"), ("!4", "!4")])
def test_compile_ids_as_torch_prints_them(text, parsed):
    assert parse_compile_id(text) == parsed


def test_a_compile_id_that_is_not_one():
    with pytest.raises(UsageError):
        parse_compile_id("0/1/2/3")
