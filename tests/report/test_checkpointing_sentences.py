"""`cagtool checkpointing`'s sentences where a mode shows no measurable saving (report/checkpointing.py),
on hand-built results shaped as a real measurement of a small model is (tests/scripts' sizes: a
heap held for backward that rounds to 0 MiB on both sides, in aot and in ca)."""

from __future__ import annotations

from cagtool.capture.steps import heap_in_use
from cagtool.report.checkpointing import CheckpointingResult, HeapHeld, ModeSaving, Side, checkpointing_lines

MIB = 2**20


def _side(variant: str, held_mib: float, peak_mib: float) -> Side:
    heap = HeapHeld(heap_in_use.HEAP_SOURCE, 6, int(held_mib * MIB), 0, int(peak_mib * MIB), 0)
    return Side(variant, "/r", "finished", 370 * MIB, 0, heap=heap)


def _mode(mode: str, held: tuple[float, float], peak: tuple[float, float]) -> ModeSaving:
    return ModeSaving(mode, _side("as written", held[0], peak[0]), _side("plain", held[1], peak[1]))


def test_no_measurable_saving_in_either_mode_is_said_in_whole_sentences():
    lines = checkpointing_lines(CheckpointingResult("/r", [_mode("aot", (0.2, 0.3), (0.3, 0.4)), _mode("ca", (0.3, 0.2), (0.4, 0.4))]))
    assert lines[0] == ("checkpointing saves none of the memory held for backward under aot and none under ca (heap in use at "
                        "backward entry); at the backward's peak it makes no measurable saving under aot and ca")
    held = [line for line in lines if "the memory held for backward (" in line]
    assert [line.split(" (")[0] for line in held] == ["aot: checkpointing makes no measurable saving in the memory held for backward",
                                                      "ca: checkpointing makes no measurable saving in the memory held for backward"]
    peaks = [line for line in lines if "inside the backward" in line]
    assert all(line.endswith("(sampled maximum, median): no measurable saving at the backward's peak") for line in peaks), peaks


def test_a_saving_in_one_mode_and_none_in_the_other_at_the_peak_keeps_one_verb_each():
    lines = checkpointing_lines(CheckpointingResult("/r", [_mode("aot", (64, 192), (100, 150)), _mode("ca", (64, 192), (300, 300))]))
    assert lines[0].endswith("; at the backward's peak it saves 33% under aot and makes no measurable saving under ca")


def test_a_plain_call_that_held_nothing_is_said_not_compared_never_a_crash():
    """A re-run whose heap at the backward's entry read 0 (the hunt's reentrant checkpoint with a
    ragged last batch): no saving can be a fraction of it; `cagtool checkpointing` ended with an
    internal error (exit 4) after its three re-runs."""
    from cagtool.report.checkpointing import heap_lines

    lines = heap_lines(_mode("ca", (12.0, 0.0), (20.0, 18.0)))
    assert lines == ["ca: heap held for backward not compared (12 MiB checkpointed, 0 MiB plain: the plain call held none to compare "
                     "with); the figure below is peak RSS"]
    assert checkpointing_lines(CheckpointingResult("r", [_mode("ca", (12.0, 0.0), (20.0, 18.0))]))  # the whole report renders
