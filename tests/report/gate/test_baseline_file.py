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


def _set(path: tuple, value):
    def change(data: dict) -> None:
        where = data["modes"]["ca"]
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value
    return change


_FORGED = [
    # figures no run gives, which overflowed the interval arithmetic (exit 4) or were dropped unsaid
    (("step_time", "sample", "units_s", "median", 0), 1e-300, "units_s"),
    (("step_time", "sample", "cpu_units_s", "median", 2), 1e300, "cpu_units_s"),
    (("step_time", "sample", "cpu_units_s", "median", 2), 5e-10, "cpu_units_s"),
    (("step_time", "sample", "values_s", "median"), 1e7, "values_s"),
    (("step_time", "median_s"), 5e-10, "median_s"),
    (("step_time", "cpu_wait"), 1.0, "cpu_wait"),  # 1 / (1 - w): "up to 1e+09x"
    (("compile_cpu_wait",), 1.0, "compile_cpu_wait"),
    (("compile_time_s",), 1e300, "compile_time_s"),
    (("compile_time_s",), 1e-300, "compile_time_s"),
    (("compile_time_samples_s", 1), 1e-300, "compile_time_samples_s"),
    (("ca_graphs",), 10**400, "ca_graphs"),
    (("peak_rss_bytes",), 10**40, "peak_rss_bytes"),
    # a forged "nothing else ran" would make a loaded run's waits its own; a forged unwaited figure, a FAIL
    (("step_time", "others_cores"), -1.0, "others_cores"),
    (("step_time", "sample", "unwaited_units_s"), {"mean": [1e300, 1e300, 1e300]}, "unwaited_units_s"),
    (("step_time", "sample", "unwaited_units_s"), {"mean": [0.01]}, "holds 1 or 3 figures"),
]


@pytest.mark.parametrize("path, value, named", _FORGED, ids=[f"{named}-{index}" for index, (_, _, named) in enumerate(_FORGED)])
def test_a_figure_no_run_gives_is_refused_naming_its_field(tmp_path, path, value, named):
    from cagtool.errors import UnreadableInput

    data = json.loads(V1.read_text())
    _set(path, value)(data)
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    with pytest.raises(UnreadableInput, match=named):
        load_baseline(forged)


def test_figures_at_the_edges_of_a_run_read(tmp_path):
    """A compile time of 0 (a mode that compiled nothing), a share just short of 1 and steps of a
    nanosecond or a day are figures a run can give: read. So is a step figure of 0 s: a clock
    coarser than the steps reads some steps as 0 s, and a p10 of them as 0 (a gate check on it is
    an error naming the process, test_gate_noise.py)."""
    data = json.loads(V1.read_text())
    for change in (_set(("compile_time_s",), 0.0), _set(("compile_cpu_wait",), 0.999999), _set(("step_time", "cpu_wait"), 0.999999),
                   _set(("step_time", "sample", "units_s", "median", 0), 1e-9), _set(("step_time", "sample", "units_s", "median", 1), 86400.0),
                   _set(("step_time", "sample", "cpu_units_s", "p10", 2), 0.0), _set(("step_time", "p10_s"), 0.0)):
        change(data)
    readable = tmp_path / "edges.json"
    readable.write_text(json.dumps(data))
    ca = load_baseline(readable).modes["ca"]
    assert ca.compile_time_s == 0.0 and ca.step_time.cpu_wait == 0.999999


def test_the_others_cpu_and_the_steps_time_less_their_waits_are_read_back(tmp_path):
    data = json.loads(V1.read_text())
    _set(("step_time", "others_cores"), 0.02)(data)
    _set(("step_time", "sample", "unwaited_units_s"), {"mean": [0.004, 0.0041, 0.0042]})(data)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    ca = load_baseline(path).modes["ca"]
    assert ca.step_time.others_cores == 0.02 and ca.step_time.sample.unwaited_units == {"mean": (0.004, 0.0041, 0.0042)}


def test_a_share_that_rounds_to_one_is_written_short_of_it(tmp_path):
    from dataclasses import replace

    baseline = load_baseline(V1)
    ca = baseline.modes["ca"]
    nearly_all = replace(ca, compile_wait=0.9999999, step_time=replace(ca.step_time, cpu_wait=0.99999996))
    saved = save_baseline(replace(baseline, modes={**baseline.modes, "ca": nearly_all}), tmp_path / "b.json")
    again = load_baseline(saved).modes["ca"]
    assert again.compile_wait == again.step_time.cpu_wait == 0.999999


def test_each_processs_own_uncertainty_is_saved_and_read_back(tmp_path):
    """A baseline keeps what each process's steps say of its own figure (intervals.own_noises), so a
    gate of one run against one saved process weighs both; an older file without it reads as 0."""
    from dataclasses import replace

    baseline = load_baseline(V1)
    ca = baseline.modes["ca"]
    sample = ca.step_time.sample
    noise = {name: tuple(0.125 * (i + 1) for i in range(sample.repetitions)) for name in sample.units}
    with_noise = replace(baseline, modes={**baseline.modes, "ca": replace(ca, step_time=replace(ca.step_time, sample=replace(sample, unit_noise=noise)))})
    path = save_baseline(with_noise, tmp_path / "noise.json")
    assert load_baseline(path).modes["ca"].step_time.sample.unit_noise == noise
    assert load_baseline(V1).modes["ca"].step_time.sample.unit_noise == {}
