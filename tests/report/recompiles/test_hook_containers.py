"""A gradient-norm hook per parameter, made by a factory, under compiled autograd
(tests/scripts/hook_norms_by_name.py): Dynamo compiles the hook and guards the container it writes
into. Into a dict by name: one recompile when it fills (torch's guard `not G['__import___main__'].norms`),
nothing to fix, and no torch._dynamo.disable patch (`--verify` measured it on this script: 1 -> 2
recompiles and the graph split around the hook). Into a list: a recompile every backward, and the
patch wraps the factory's call where the hook is registered (measured: 5 -> 2)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import ROOT
from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, cause_words, explain
from cagtool.report.recompiles.table import recompile_table
from cagtool.verify.patches import patch_for

pytestmark = pytest.mark.slow  # one `cagtool run --modes ca` per container, shared by the session

SCRIPT = "../tests/scripts/hook_norms_by_name.py"


def _cause(record_run, into: str):
    run = record_run(SCRIPT, "--into", into)
    assert run.returncode == 0, run.stderr[-2000:]
    record = load_run(run.path).modes["ca"]
    table = recompile_table(record)
    [cause] = [c for c in explain(table).causes if c.code == CAUSE_DYNAMO_CA_GRAPH]
    return run, record, cause, cause_words(cause, table.cwd)


def test_a_hook_filling_a_dict_by_name_recompiles_once_and_is_told_nothing_to_fix(record_run):
    run, record, cause, words = _cause(record_run, "dict")
    events = [json.loads(line) for line in (run.path / "ca" / "events.jsonl").read_text().splitlines()]
    reasons = [e["reasons"][0] for e in events if e.get("kind") == "dynamo_recompile"]
    assert len(reasons) == 1 and reasons[0].split(":", 1)[1].split("#")[0].strip() == "not G['__import___main__'].norms"
    assert "the length of `norms` changed (1 recompile)" in words.title, words.title
    why, fixes = " ".join(words.why), words.fix
    assert "was empty when Dynamo first compiled the hook" in why and "has kept its size" in why, why
    assert "every backward recompiles" not in why and "appends" not in why
    assert fixes[0].startswith("Nothing to fix: one recompile when the hook first filled `norms`"), fixes
    assert "norms = {name: None for name, _ in model.named_parameters()}" in fixes[1]
    assert not any(f.startswith("Keep the hook out of Dynamo") for f in fixes)
    script = ROOT / "tests" / "scripts" / "hook_norms_by_name.py"
    assert patch_for(cause, str(script), SCRIPT, script.read_bytes()) is None


def test_a_hook_appending_to_a_list_is_patched_where_its_factory_registers_it(record_run):
    run, record, cause, words = _cause(record_run, "list")
    assert cause.count == 5 and "the length of `history` changed" in words.title, words.title
    assert words.fix[0].startswith("Keep the hook out of Dynamo")
    script = ROOT / "tests" / "scripts" / "hook_norms_by_name.py"
    source = script.read_bytes()
    patch = patch_for(cause, str(script), "hook_norms_by_name.py", source)
    assert patch is not None and patch.name == "hook-dynamo-disable" and patch.applicable, patch.why_not
    registration = next(n for n, line in enumerate(source.decode().splitlines(), 1) if "p.register_hook(norm_hook(name))" in line)
    assert patch.line == registration
    assert "+    p.register_hook(torch._dynamo.disable(norm_hook(name)))" in patch.diff, patch.diff
    assert patch.patched.count("torch._dynamo.disable(") == 1
