"""cpu_wait.json's layout (record/cpu_wait_file.py): written as before, read leniently (a file
that is not one is no reading, never a refused record)."""

from __future__ import annotations

import json

from cagtool.record.cpu_wait_file import CPU_WAIT_FORMAT, cpu_wait_text, read_cpu_wait

SAMPLES = [(1234.56789, 0.1234567, 0.0), (1235.0678912, 0.6234567891, 0.25)]


def test_written_as_the_dict_it_replaced():
    by_hand = {"format": "cagtool.cpu_wait/1", "clock": "perf_counter", "sample_s": 0.5, "columns": ["t", "run_s", "wait_s"],
               "samples": [[round(t, 4), round(r, 6), round(w, 6)] for t, r, w in SAMPLES]}
    assert cpu_wait_text(0.5, SAMPLES) == json.dumps(by_hand, indent=2, default=str) + "\n"


def test_read_back_and_damaged_files_are_no_reading():
    samples, sample_s = read_cpu_wait(cpu_wait_text(0.25, SAMPLES).encode())  # type: ignore[misc]
    assert sample_s == 0.25 and samples == [[1234.5679, 0.123457, 0.0], [1235.0679, 0.623457, 0.25]]
    assert read_cpu_wait(json.dumps({"format": CPU_WAIT_FORMAT, "samples": [[1, 2, 3, 4]]}).encode()) == ([[1.0, 2.0, 3.0]], 0.5)
    for bad in (b"{not json", b"[]", json.dumps({"samples": [[1, 2]]}).encode(), json.dumps({"samples": [["a", 1, 2]]}).encode(), b'{"samples": [[NaN, 1, 2]]}'):
        assert read_cpu_wait(bad) is None, bad
