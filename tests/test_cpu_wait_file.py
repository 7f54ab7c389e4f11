"""cpu_wait.json's layout (record/cpu_wait_file.py): written as before, read leniently (a file
that is not one is no reading, never a refused record)."""

from __future__ import annotations

import json

import pytest

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



@pytest.mark.slow
def test_a_run_longer_than_the_file_holds_keeps_every_other_sample(tmp_path):
    """1.2 million samples (a week at 0.5 s) make more than the reader reads (MAX_JSON_FILE_BYTES):
    written as every 2nd sample and the last, at sample_s 1.0, the file a real one the reader takes."""
    from cagtool.record.regular_files import read_record_bytes
    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    samples = [(100000.1234 + i * 0.5, 1000.123456 + i * 0.4, 10.123456 + i * 0.01) for i in range(1_200_001)]
    path = tmp_path / "cpu_wait.json"
    path.write_text(cpu_wait_text(0.5, samples))
    assert MAX_JSON_FILE_BYTES // 2 < path.stat().st_size <= MAX_JSON_FILE_BYTES
    read, sample_s = read_cpu_wait(read_record_bytes(path, max_bytes=MAX_JSON_FILE_BYTES))  # type: ignore[misc]
    assert sample_s == 1.0 and len(read) == 600_001
    assert read[0][0] == 100000.1234 and read[1][0] == 100001.1234 and read[-1][0] == round(samples[-1][0], 4)


def test_the_stall_is_read_where_the_file_names_it():
    four = [(1234.56789, 0.1234567, 0.0, 0.0), (1235.06789, 0.6234567, 0.25, 0.4)]
    text = cpu_wait_text(0.5, four)
    assert json.loads(text)["columns"] == ["t", "run_s", "wait_s", "stall_s"]
    assert read_cpu_wait(text.encode()) == ([[1234.5679, 0.123457, 0.0, 0.0], [1235.0679, 0.623457, 0.25, 0.4]], 0.5)
    # a sample without it (a file cut or forged): the three columns every file has
    mixed = json.dumps({"format": CPU_WAIT_FORMAT, "columns": ["t", "run_s", "wait_s", "stall_s"], "samples": [[1, 2, 3, 4], [2, 3, 4]]})
    assert read_cpu_wait(mixed.encode()) == ([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0]], 0.5)


def test_a_file_nested_deeper_than_the_decoder_goes_is_no_reading():
    """100,000 nested arrays, deeper than msgspec decodes (RecursionError): no reading, as any
    other damaged file, never an error that reaches a report command."""
    nested = b'{"format": "cagtool.cpu_wait/1", "samples": [], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert read_cpu_wait(nested) is None


def test_the_others_cpu_is_read_where_the_file_names_it_after_the_stall():
    six = [(1234.5, 0.1, 0.0, 0.0, 0.0, 0.0), (1235.0, 0.6, 0.25, 0.4, 0.3, 0.5)]
    text = cpu_wait_text(0.5, six)
    assert json.loads(text)["columns"] == ["t", "run_s", "wait_s", "stall_s", "others_s", "others_span_s"]
    assert read_cpu_wait(text.encode()) == ([[1234.5, 0.1, 0.0, 0.0, 0.0, 0.0], [1235.0, 0.6, 0.25, 0.4, 0.3, 0.5]], 0.5)
    # values the columns do not name are no reading of the others
    unnamed = json.dumps({"format": CPU_WAIT_FORMAT, "columns": ["t", "run_s", "wait_s", "stall_s"], "samples": [[1, 2, 3, 4, 5, 6]]})
    assert read_cpu_wait(unnamed.encode()) == ([[1.0, 2.0, 3.0, 4.0]], 0.5)


def test_forged_others_columns_are_no_reading_of_the_others():
    """Others that step back, or a span that outgrows the clock, are not what a sampler writes: a
    forged "nothing else ran" would make a loaded run's waits its own. The other columns still read."""
    good = [[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [0.5, 0.4, 0.1, 0.1, 0.2, 0.5], [1.0, 0.8, 0.2, 0.2, 0.19, 1.0]]  # a dip of a tick
    columns = ["t", "run_s", "wait_s", "stall_s", "others_s", "others_span_s"]
    assert len(read_cpu_wait(json.dumps({"columns": columns, "samples": good}).encode())[0][0]) == 6  # type: ignore[index]
    for forged in ([[0.0, 0, 0, 0, 0.0, 0.0], [0.5, 0.4, 0.1, 0.1, -5.0, 0.5]],      # others below 0
                   [[0.0, 0, 0, 0, 2.0, 0.0], [0.5, 0.4, 0.1, 0.1, 0.0, 0.5]],       # others stepping back 2 s in 0.5 s
                   [[0.0, 0, 0, 0, 0.0, 0.0], [0.5, 0.4, 0.1, 0.1, 0.0, 1e9]]):      # a span the clock never had
        samples, _ = read_cpu_wait(json.dumps({"columns": columns, "samples": forged}).encode())  # type: ignore[misc]
        assert [len(s) for s in samples] == [4, 4], forged
