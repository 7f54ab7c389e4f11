"""The baseline file's layout (report/gate/baseline.py, msgspec types): a file a cagtool of
format version 1 wrote reads back and writes out byte for byte, and a file saved before the
later additive fields reads with their documented defaults.

baseline_v1.json: `cagtool baseline save RUN --accumulate` run three times on a recording of
sample_scripts/graph_breaks.py (--backend eager), written by the hand-written encoder this file
format had before; the hostname and paths then replaced (a non-ASCII hostname: json's escapes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cagtool.report.gate.baseline import baseline_to_dict, load_baseline, save_baseline

V1 = Path(__file__).parent / "baseline_v1.json"


def test_a_saved_baseline_reads_and_writes_back_byte_for_byte(tmp_path):
    baseline = load_baseline(V1)
    assert set(baseline.modes) == {"eager", "aot", "ca"}
    ca = baseline.modes["ca"]
    assert ca.step_time is not None and ca.step_time.sample is not None and ca.step_time.sample.repetitions == 3
    assert ca.compile_time_samples_s == (1.58722, 1.58722, 1.58722)
    assert baseline.machine["hostname"] == "ci-runner-\u00e9"
    again = save_baseline(baseline, tmp_path / "again.json")
    assert again.read_bytes() == V1.read_bytes()


def test_a_baseline_saved_before_the_additive_fields_reads_with_their_defaults(tmp_path):
    data = json.loads(V1.read_text())
    ca = data["modes"]["ca"]
    for key in ("ca_recompiles", "forward_graphs", "backward_graphs", "repetitions", "compile_time_samples_s", "status", "exit_code"):
        del ca[key]
    for key in ("mean_s", "cpu_wait"):
        del ca["step_time"][key]
    for key in ("cpu_units_s", "blocks", "clock", "cpu_bound"):
        del ca["step_time"]["sample"][key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    snap = load_baseline(path).modes["ca"]
    assert (snap.ca_recompiles, snap.forward_graphs, snap.backward_graphs, snap.repetitions) == (ca["ca_cache_misses"], 0, 0, 1)
    assert (snap.status, snap.exit_code, snap.compile_time_samples_s) == ("finished", None, ())
    assert snap.step_time is not None and (snap.step_time.mean_s, snap.step_time.cpu_wait) == (None, None)
    sample = snap.step_time.sample
    assert sample is not None and (sample.cpu_units, sample.blocks, sample.clock, sample.cpu_bound) == ({}, (1, 2, 3), "wall", False)
    # Written again, it has every field, cpu_wait still only where it was measured.
    written = baseline_to_dict(load_baseline(path))["modes"]["ca"]
    assert written["ca_recompiles"] == ca["ca_cache_misses"] and "cpu_wait" not in written["step_time"]
    assert "cpu_wait" in baseline_to_dict(load_baseline(V1))["modes"]["ca"]["step_time"]


def test_a_sample_whose_process_count_is_not_its_figures_is_refused(tmp_path):
    """A forged `repetitions` (300 million) against the file's 3 figures a statistic: the file says
    what it holds, never more (it made gate and `baseline show` fill the memory, exit 4)."""
    import pytest

    from cagtool.errors import UnreadableInput

    data = json.loads(V1.read_text())
    sample = data["modes"]["ca"]["step_time"]["sample"]
    sample["repetitions"], sample["blocks"] = 300_000_000, None
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UnreadableInput, match="says 300000000 processes but holds 3 figures a statistic"):
        load_baseline(path)


def test_a_forged_wait_share_beyond_one_is_refused(tmp_path):
    """A baseline's waits are shares of runnable time: 5.0 (which would make every check
    against it INCONCLUSIVE as heavily loaded) is refused when read, naming the field."""
    from cagtool.errors import UnreadableInput
    from cagtool.report.gate.baseline import load_baseline

    source = Path(__file__).parent / "baseline_v1.json"
    data = json.loads(source.read_text())
    mode = next(iter(data["modes"].values()))
    mode["compile_cpu_wait"] = 5.0
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    with pytest.raises(UnreadableInput) as info:
        load_baseline(forged)
    assert "compile_cpu_wait" in str(info.value)
