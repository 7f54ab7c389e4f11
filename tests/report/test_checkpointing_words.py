"""The words of `cagtool checkpointing`'s heap figures on hand-built results (report/checkpointing.py),
and the readings' bookkeeping (capture/steps/heap_in_use.py) on glibc's own mallinfo2."""

from __future__ import annotations

import ctypes

import pytest

from cagtool.capture.steps import heap_in_use
from cagtool.report.checkpointing import CheckpointingResult, HeapHeld, ModeSaving, Side, checkpointing_lines, result_from_dict

MIB = 2**20


def _side(variant: str, held: int, spread: int, peak: int, source: str | None = heap_in_use.HEAP_SOURCE) -> Side:
    heap = HeapHeld(source, 4, held * MIB, spread * MIB, peak * MIB, spread * MIB) if source else HeapHeld(None, 0, None, None, None, None, "no mallinfo2")
    return Side(variant, "/r", "finished", 1000 * MIB, 0, heap=heap)


def test_within_the_steps_spread_is_no_measurable_saving_not_a_sign():
    result = CheckpointingResult("/r", [ModeSaving("aot", _side("as written", 100, 3, 150), _side("plain", 102, 3, 151))])
    lines = checkpointing_lines(result)
    assert lines[1] == ("aot: checkpointing makes no measurable saving in the memory held for backward (heap in use at backward entry, "
                        "median of 4 steady steps: 100 MiB checkpointed, 102 MiB plain; within the steps' spread of 3 MiB)")
    assert lines[0].startswith("checkpointing saves none of the memory held for backward under aot")
    assert result.modes[0].held_saving == 0.0


def test_a_saving_at_entry_lost_at_the_peak_is_said_so_and_the_json_round_trips():
    result = CheckpointingResult("/r", [ModeSaving("ca", _side("as written", 64, 0, 352), _side("plain", 192, 0, 304))])
    again = result_from_dict(result.to_dict())
    assert again.modes[0].checkpointed.heap == result.modes[0].checkpointed.heap
    lines = checkpointing_lines(again)
    assert lines[0] == ("checkpointing saves 67% of the memory held for backward under ca (heap in use at backward entry); "
                        "at the backward's peak it costs 16% under ca")
    assert lines[2].endswith("costs 16% at the backward's peak: the recomputed activations are all held at once inside the backward, "
                             "so the saving at its entry is gone at its peak (compiled autograd: a non-reentrant checkpoint "
                             "outside the compiled region gives no memory saving)")


def test_a_heap_read_below_the_steps_start_saves_all_of_the_plain_calls_never_more():
    """A re-run whose heap at backward entry read below its step's start (-1 MiB: what the step
    freed, glibc's caches), against 3 MiB plain, had read "saves 127% ... -1 MiB checkpointed"."""
    result = CheckpointingResult("/r", [ModeSaving("aot", _side("as written", -1, 0, 2), _side("plain", 3, 0, 4))])
    lines = checkpointing_lines(result)
    assert result.modes[0].held_saving == 1.0
    assert lines[0].startswith("checkpointing saves 100% of the memory held for backward under aot"), lines[0]
    assert "0 MiB checkpointed, 3 MiB plain" in lines[1] and "-1 MiB" not in "\n".join(lines), lines


def test_a_peak_rss_under_half_a_percent_apart_is_no_difference_either_way():
    for checkpointed, plain in ((1000, 1001), (1001, 1000)):
        result = CheckpointingResult("/r", [ModeSaving("aot", _side("as written", 0, 0, 0, None), _side("plain", 0, 0, 0, None))])
        result.modes[0].checkpointed.peak_rss_bytes, result.modes[0].plain.peak_rss_bytes = checkpointed * MIB, plain * MIB
        line = checkpointing_lines(result)[-1]
        assert "(no difference;" in line and "0%" not in line, line


def test_without_mallinfo2_the_figure_is_peak_rss_and_says_so():
    result = CheckpointingResult("/r", [ModeSaving("aot", _side("as written", 0, 0, 0, None), _side("plain", 0, 0, 0, None))])
    lines = checkpointing_lines(result)
    assert lines == ["aot: heap held for backward not measured (no mallinfo2); the figure below is peak RSS",
                     "aot: peak RSS 1000 MiB checkpointed, 1000 MiB plain (no difference; the whole process, compile memory and freed memory glibc kept included)"]


def test_an_older_result_without_heap_figures_still_renders():
    old = {"format": "cagtool-checkpointing", "version": 1, "run": "/r", "modes": [{"mode": "aot", "checkpointed": {
        "variant": "as written", "run": "/a", "status": "finished", "peak_rss_bytes": 2 * MIB, "recompute_recompiles": 0},
        "plain": {"variant": "plain", "run": "/b", "status": "finished", "peak_rss_bytes": 4 * MIB, "recompute_recompiles": 0}}]}
    assert checkpointing_lines(old) == ["aot: peak RSS 2 MiB checkpointed, 4 MiB plain (saves 50%; the whole process, compile memory and freed memory glibc kept included)"]


def test_the_readings_follow_the_heap_a_backward_holds():
    """Real glibc: 64 MiB held between a step end and a backward's entry is read as such."""
    read = heap_in_use.mallinfo2()
    if read is None:
        pytest.skip("not glibc")
    readings = heap_in_use.HeapReadings(read)
    readings.step_ended()
    held = ctypes.create_string_buffer(64 * MIB)  # malloc'd (mmapped), like a large tensor
    readings.backward_began()
    readings.backward_ended()
    del held
    summary = readings.summary()
    assert summary["backward_calls"] == 1 and summary["errors"] == 0
    assert 64 * MIB <= summary["at_entry"][0] - summary["before"][0] < 66 * MIB
    assert summary["max_inside"][0] >= summary["at_entry"][0]


def test_readings_are_off_unless_asked(monkeypatch):
    monkeypatch.delenv(heap_in_use.HEAP_READINGS_ENV, raising=False)
    assert heap_in_use.readings_if_requested() is None
    monkeypatch.setenv(heap_in_use.HEAP_READINGS_ENV, "1")
    assert heap_in_use.readings_if_requested() is not None
