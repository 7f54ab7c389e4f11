"""DDP's gradient accumulation with `no_sync()` (tests/scripts/ddp_no_sync_accumulation.py, 2 ranks
over gloo under torchrun) under compiled autograd, with a smaller last batch. DDP's hooks read
`require_backward_grad_sync`, so each CA graph's code is compiled once per value of it: nothing to
change in the script. On the last batch the entry made for True fails on the size: a recompile for
the last batch, which follows the forward's recompile, not the flag's. Both were explained as "Not
your code: torch's hooks read a value that keeps changing ... Report it to torch"."""

from __future__ import annotations

import pytest

from conftest import ROOT, torchrun_recorded

from cagtool.record.loader import load_run
from cagtool.report.recompiles.explain import CAUSE_DYNAMO_CA_GRAPH, CAUSE_DYNAMO_FRAME, CAUSE_SHAPES, cause_words, explain
from cagtool.report.recompiles.table import SOURCE_DYNAMO_CA_GRAPH, recompile_table

pytestmark = pytest.mark.slow
SCRIPT = str(ROOT / "tests" / "scripts" / "ddp_no_sync_accumulation.py")


@pytest.fixture(scope="module")
def no_sync_run(tmp_path_factory):
    return torchrun_recorded(tmp_path_factory, "ddp-no-sync", SCRIPT, backend="aot_eager")


def test_the_no_sync_flag_is_compiled_once_per_value_and_the_last_batch_recompile_is_the_sizes(no_sync_run):
    record = load_run(no_sync_run).mode("ca", rank=0)
    table = recompile_table(record)
    explanation = explain(table)
    forward = next(c for c in explanation.causes if c.code == CAUSE_DYNAMO_FRAME)
    flags = [c for c in explanation.causes if c.code == CAUSE_DYNAMO_CA_GRAPH and "require_backward_grad_sync" in c.facts.get("guard", "")]
    assert flags, [(c.number, c.code, c.facts.get("guard")) for c in explanation.causes]
    for cause in flags:
        fix = " ".join(cause_words(cause, table.cwd).fix)
        assert fix.startswith("Nothing to change in your code") and "no_sync()" in fix and "Report it" not in fix, fix
    # The graph code's recompile on the last batch is the backward's changed sizes, following the forward.
    sizes = next(c for c in explanation.causes if c.code == CAUSE_SHAPES)
    assert sizes.caused_by == forward.number
    assert any(row.source == SOURCE_DYNAMO_CA_GRAPH for row in sizes.rows), [r.compile_id for r in sizes.rows]
    assert not [c for c in explanation.causes if any("Report it to" in f for f in cause_words(c, table.cwd).fix)]
