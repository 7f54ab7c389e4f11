"""Files an earlier mode wrote in the job's working directory (RunMeta.written_before) are no
evidence by themselves that a mode resumed from them: a job that writes its own log or counters
dump in each mode leaves one for the next. The comparison says "resumed from files" only where the
record shows what a resume does (fewer steps: tests/test_workdir_between_modes.py), never where it
shows another cause: ca agreeing with aot, compiled alike, both differing from eager."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import cli_in_process

# What each mode of a job that dumps torch's counters into its working directory leaves for the next.
WRITTEN = {"aot": {"paths": ["ctr/job.plain.rx.2273.json"], "count": 1},
           "ca": {"paths": ["ctr/job.plain.rx.2273.json", "ctr/job.plain.rx.2331.json"], "count": 2}}


def _with_files_written_before(run_path: Path, tmp_path: Path) -> Path:
    copy = tmp_path / run_path.name
    shutil.copytree(run_path, copy, symlinks=True)
    meta = json.loads((copy / "run.json").read_text())
    meta["written_before"] = WRITTEN
    (copy / "run.json").write_text(json.dumps(meta))
    return copy


def _compare_text(run_dir: Path, tmp_path: Path) -> str:
    code, text, err = cli_in_process("compare", str(run_dir), env={"CI": "true", "COLUMNS": "200"}, cwd=tmp_path)
    assert code == 0, err
    return " ".join(text.split())


@pytest.mark.slow
@pytest.mark.parametrize("script, differ_from", [
    ("compiled_gradient_differs.py", ""),  # the losses part after the first step
    ("compiled_forward_differs.py", " from the first step"),  # the first step's already differ
])
def test_files_an_earlier_mode_wrote_are_not_blamed_where_ca_computes_what_aot_does(record_run, tmp_path, script, differ_from):
    run = record_run(f"../tests/scripts/{script}", modes="eager,aot,ca")
    assert run.returncode == 0, run.stderr
    text = _compare_text(_with_files_written_before(run.path, tmp_path), tmp_path)
    headline = text.split("Modes side by side")[0]
    assert f"numerics: ca agrees with aot; both differ from eager{differ_from}" in headline, headline
    assert "resumed from files" not in text and "started after an earlier mode wrote" not in text, text
    assert "started from files an earlier mode wrote" not in text, text
    assert ("Numerics: ca against aot (compiled alike): losses and final norms agree within rtol 0.001, atol 1e-06; "
            "largest relative difference 0") in text, text


def test_an_unseeded_job_under_seed_off_is_not_blamed_on_files_an_earlier_mode_wrote(record_run, tmp_path):
    """`cagtool run --seed off` on a script that seeds nothing: the modes draw other weights and
    inputs, so the first step's losses differ. With a file an earlier mode wrote in the working
    directory (pytorch/examples' siamese network saves its model at its end and never loads it),
    that read "started from files an earlier mode wrote", and the inputs-differ line said "cagtool
    seeds every mode alike", of a run cagtool seeded nothing in. The seed, not the file, is named."""
    run = record_run("../tests/scripts/unseeded_training.py", modes="eager,aot,ca", extra=("--seed", "off"))
    assert run.returncode == 0, run.stderr
    text = _compare_text(_with_files_written_before(run.path, tmp_path), tmp_path)
    assert "numerics not comparable: inputs differ (unseeded?)" in text, text
    assert "started from files an earlier mode wrote" not in text and "started after an earlier mode wrote" not in text, text
    assert "cagtool seeded nothing (--seed off)" in text and "cagtool seeds every mode alike" not in text, text
    code, gate, _ = cli_in_process("gate", str(_with_files_written_before(run.path, tmp_path / "g")), "--max-grad-diff", "1",
                                   env={"CI": "true"}, cwd=tmp_path)
    assert "wrote" not in gate, gate


def test_a_full_list_of_files_read_is_no_evidence_that_a_file_was_not_read():
    """A process keeps the first WORKDIR_READS_KEPT files of its working directory it read: a job
    that reads a dataset's files there first may read its checkpoint after the list is full, so a
    full list says nothing of what was not read."""
    from types import SimpleNamespace

    from cagtool.record.manifest import WORKDIR_READS_KEPT
    from cagtool.report.compare.analysis import workdir_reads

    def record(*reads: list) -> SimpleNamespace:
        def process(read: list) -> SimpleNamespace:
            return SimpleNamespace(manifest=SimpleNamespace(options={"workdir_reads": read}))

        main, *others = [process(r) for r in reads]
        return SimpleNamespace(manifest=main.manifest, processes={f"rank{i}": p for i, p in enumerate(others, 1)})

    assert workdir_reads(record(["snapshot.pt"], ["data/0.bin"])) == frozenset({"snapshot.pt", "data/0.bin"})
    assert workdir_reads(record([f"data/{i}.bin" for i in range(WORKDIR_READS_KEPT)])) is None
    assert workdir_reads(record(["snapshot.pt"], None)) is None  # a process that did not keep them


def test_a_mode_that_read_an_earlier_modes_file_and_ran_fewer_steps_resumed_though_its_losses_agree():
    """pytorch/examples' ddp-tutorial-series: its loss is a cross entropy over one class (zero at
    every step) and it resumes from snapshot.pt; aot and ca read the snapshot eager wrote and ran
    32 steps of eager's 96, yet the numerics read "agree" (a loss that does not move agrees from
    any step) and no resume was named. Reading the file and running fewer steps is the resume;
    the agreement is said of the other records only."""
    from dataclasses import replace

    from cagtool.record.manifest import WrittenFiles
    from cagtool.report.compare.analysis import LOSS, Numerics, NumericsDiff, Tolerance
    from cagtool.report.compare.render import numerics_lines

    snapshot = WrittenFiles(["snapshot.pt"], 1)
    diffs = tuple(NumericsDiff(LOSS, record, "eager", 32, 0.0, note=f"{record} has 32 losses, eager 96: compared the 32 steps both ran")
                  for record in ("aot", "ca"))
    numerics = Numerics("eager", Tolerance(), diffs, written_before={"aot": snapshot, "ca": snapshot},
                        fewer_steps=("aot", "ca"), reads={"aot": frozenset({"snapshot.pt"}), "ca": frozenset({"data.bin"})})
    assert numerics.agree and list(numerics.resumed) == ["aot"]
    said = [line for line, _ in numerics_lines(numerics)]
    assert said[0] == "Numerics: losses of ca agree with eager within rtol 0.001, atol 1e-06; largest relative difference 0", said
    assert said[1].startswith("Numerics: aot started after an earlier mode wrote snapshot.pt in the job's working directory"), said
    # its 32 steps are not eager's first 32: no note says they were compared as the same steps
    assert said[2:] == ["  note: ca has 32 losses, eager 96: compared the 32 steps both ran"], said
    # the same steps in both (no resume): read or not, nothing is named
    assert not replace(numerics, fewer_steps=()).resumed
