"""Parameters a mode never updated that the reference did: the optimizers' parameters' version
counters, read when each optimizer is made and at the end (capture/steps/final_state.py), compared
by `compare` as a numerics difference (report/compare/analysis.py `_updated_diff`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cagtool.record.loader import load_run
from cagtool.record.schema import FinalStateEvent
from cagtool.report.compare.analysis import PARAMS_UPDATED, NumericsSample, compare_samples
from cagtool.report.compare.closeness import Tolerance
from conftest import cagtool_in_process

SCRIPT = str(Path(__file__).resolve().parents[2] / "scripts" / "optimizer_in_backward.py")


def _sample(record: str, updated: int | None, never: tuple[str, ...] = (), watched: int | None = 4, finished: bool = True) -> NumericsSample:
    return NumericsSample(record=record, losses={0: 1.0, 1: 0.9}, param_norm=4.75, grad_norm=None, finished=finished,
                          params_watched=None if updated is None else watched, params_updated=updated, never_updated=never)


def test_a_mode_that_updated_fewer_parameters_disagrees_whatever_its_norms_say():
    eager = _sample("eager", 4)
    ca = _sample("ca", 1, ("0.bias", "0.weight", "2.weight"))
    numerics = compare_samples([eager, ca], eager, Tolerance())
    (diff,) = [d for d in numerics.diffs if d.quantity == PARAMS_UPDATED]
    assert not diff.agrees and not numerics.agree and diff in numerics.disagreements
    assert (diff.value, diff.reference_value, diff.compared) == (1.0, 4.0, 4)
    assert "never updated in ca: 0.bias, 0.weight, 2.weight" in diff.note
    # Nothing said where it cannot be told: as many updated, one side not read, other parameter sets, a run that did not finish.
    for other in (_sample("ca", 4), _sample("ca", None), _sample("ca", 1, watched=5), _sample("ca", 1, finished=False)):
        assert not [d for d in compare_samples([eager, other], eager, Tolerance()).diffs if d.quantity == PARAMS_UPDATED]
    # The reference's own never-updated parameters (frozen alike) are not named against the mode.
    frozen = compare_samples([_sample("eager", 3, ("emb",)), _sample("ca", 1, ("emb", "0.weight", "2.weight"))], _sample("eager", 3, ("emb",)), Tolerance())
    (diff,) = [d for d in frozen.diffs if d.quantity == PARAMS_UPDATED]
    assert "never updated in ca: 0.weight, 2.weight (" in diff.note


@pytest.mark.slow
def test_the_tutorials_optimizer_in_backward_under_compiled_autograd_is_said_to_train_one_parameter(record_run, tmp_path):
    """pytorch/tutorials' optimizer-in-backward recipe (module-level hook and dict of optimizers):
    under compiled autograd torch 2.13 steps only the last parameter's optimizer. The final norms
    agreed within the tolerance at this learning rate and `compare` said the numerics agree; the
    gradients left on the three parameters read as "its run ended at another point". Now the
    parameters ca never updated are named, and the numerics disagree."""
    run = record_run(SCRIPT, "--lookup", "dict", modes="eager,ca", backend="aot_eager")
    assert run.returncode == 0, run.stderr[-2000:]
    finals = {name: load_run(run.path).mode(name).of(FinalStateEvent)[-1] for name in ("eager", "ca")}
    assert (finals["eager"].params_watched, finals["eager"].params_updated, finals["eager"].never_updated) == (4, 4, [])
    assert (finals["ca"].params_watched, finals["ca"].params_updated) == (4, 1)
    assert sorted(finals["ca"].never_updated) == ["0.bias", "0.weight", "2.weight"]
    out = cagtool_in_process("compare", str(run.path), cwd=tmp_path)
    assert "Numerics DISAGREE with eager" in out.stdout, out.stdout
    assert "parameters updated in ca: 1 of 4, against 4 of 4 in eager" in out.stdout
    data = json.loads(cagtool_in_process("compare", "--format", "json", str(run.path), cwd=tmp_path).stdout)
    text = json.dumps(data)
    assert "params_updated" in text and "never updated in ca" in text


def test_forged_update_counts_are_not_read(tmp_path):
    """A record's FinalStateEvent is a file anyone can edit: counts that are no counts (more updated
    than watched, below zero) are left unread, never a disagreement made of them."""
    from cagtool.report.compare.analysis import _updates_read

    def final(watched, updated, never=()):
        return FinalStateEvent(seq=0, t=0.0, param_norm=1.0, grad_norm=None, num_params=4, params_watched=watched,
                               params_updated=updated, never_updated=list(never))

    assert _updates_read(final(4, 1, ("a", "b", "c"))) == {"params_watched": 4, "params_updated": 1, "never_updated": ("a", "b", "c")}
    for forged in (final(4, 5), final(4, -1), final(-2, -3), final(1, 0, ("a", "b"))):
        assert _updates_read(forged) == {}
    assert _updates_read(final(None, None)) == {} and _updates_read(None) == {}
