"""`recompiles --verify` says graph breaks as `summary` counts them: torch's count, once per compile
that meets a break (2 breaks in the code compiled 8 times count 16), at so many sites (distinct
places). A fix that only removes recompiles lowers the count with every break still in the code,
and says so; one that adds a break where there was none says that."""

from __future__ import annotations

import pytest

from conftest import cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.report.figures.metrics import mode_metrics
from cagtool.verify.verification import VERIFIED, Side, break_places, graph_break_change, judge


def _side(recompiles: int, breaks: int, places: list[str] | None) -> Side:
    return Side("x", "x", "finished", [recompiles], [0], [1 + recompiles], None, None, None, 0, None, 0.0,
                graph_breaks=[breaks], graph_break_places=[places])


SITES = ["/proj/model.py:40", "/proj/model.py:52"]


def test_fewer_compiles_of_the_same_breaks_are_not_fewer_breaks():
    verdict, reasons = judge(_side(8, 16, SITES), _side(1, 2, SITES), None, True)
    assert verdict == VERIFIED
    assert ("graph breaks (summed over compiles) 16 -> 2, at the same 2 sites: the code breaks where it did, compiled fewer times"
            in reasons), reasons
    assert graph_break_change(4, 3, frozenset(SITES[:1]), frozenset(SITES[:1])) == (
        "graph breaks (summed over compiles) 4 -> 3, at the same site: the code breaks where it did, compiled fewer times")


def test_breaks_at_new_places_are_said_with_their_cost():
    assert graph_break_change(0, 2, frozenset(), frozenset(SITES)) == (
        "graph breaks (summed over compiles) 0 -> 2, new at model.py:40, model.py:52: compiled code split where it breaks, the step "
        "time says at what cost")
    # The same count at other places is a change too; places the log does not name: the count alone.
    assert graph_break_change(2, 2, frozenset(SITES[:1]), frozenset(SITES[1:])) == (
        "graph breaks (summed over compiles) 2 -> 2, new at model.py:52, gone from model.py:40: compiled code split where it breaks, "
        "the step time says at what cost")
    # Fewer places: where they went from, no cost to weigh.
    assert graph_break_change(16, 2, frozenset(SITES), frozenset(SITES[:1])) == (
        "graph breaks (summed over compiles) 16 -> 2, gone from model.py:52")
    assert graph_break_change(16, 2, None, frozenset(SITES)) == "graph breaks (summed over compiles) 16 -> 2"
    assert graph_break_change(2, 2, None, None) is None and graph_break_change(2, 2, frozenset(SITES), frozenset(SITES)) is None


@pytest.mark.slow  # the session's recording of sample_scripts/graph_breaks.py
def test_the_places_are_summarys_sites(record_run):
    """The tutorial's two graph breaks (sample_scripts/graph_breaks.py, recorded once per session):
    `summary` says "2 graph breaks at 2 sites", and the places verify compares are those two lines."""
    recorded = record_run("graph_breaks.py", "3")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    m = mode_metrics(load_run(recorded.path).modes["ca"])
    places = break_places(m)
    assert places is not None and [p.rsplit("/", 1)[-1] for p in places] == ["graph_breaks.py:12", "graph_breaks.py:14"]
    summary = cagtool_in_process("summary", str(recorded.path)).stdout
    assert f"{m.graph_breaks} graph breaks at {len(places)} sites," in summary
