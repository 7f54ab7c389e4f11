"""A record's figures within their range, or the record refused (record/bounds.py): a run directory
or a log handed over by someone else (a CI artifact of an untrusted pull request) is text anyone can
write. A step time of NaN, -0.5 s, 1e-300 s or 1e308 s, a peak memory of -5 bytes, a duration of NaN
or an integer of 5,000 digits is refused with exit 3 and one line naming the file, the field and the
value, whether the figures are read from the lines or from the columns sidecar; `cagtool import`
leaves such a figure of a log unknown and says so (an error with --strict). And "the latest run",
which `gate`, `baseline save`, `summary` and `report` read with no RUN, is never chosen by what a
run.json says about itself. Records written by the capture side's own RecordWriter."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import BackwardEvent, DynamoCompileEvent, OptimizerStepEvent, StepEvent
from cagtool.record.writer import RecordWriter, write_run_meta
from conftest import cli_in_process as cagtool


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_run(root: Path, steps: int = 8, created_at: str = "2026-01-01T00:00:00+00:00", changed: dict | None = None,
              at_step: int = 5, columns: bool = True, manifest_fields: dict | None = None) -> Path:
    """A finished ca-mode run of `steps` optimizer steps of 10 ms, with one compile. `changed`:
    {(event class, field): value} set in the events of step `at_step` (and the compile); without
    `columns`, the sidecar is removed and the loader reads the lines."""
    changed = changed or {}
    manifest = ModeManifest(mode="ca", argv=["train.py"], target={"kind": "script", "name": "train.py"}, cwd=str(root),
                            versions={"torch": "2.13.0"}, backend="eager", dynamic=False, started_at=created_at, status="finished",
                            exit_code=0, duration_s=1.0, peak_rss_bytes=200 * 2**20, process={"key": "main", "role": "main"})
    writer = RecordWriter(root / "ca", manifest, clock_start=0.0)

    def fields(cls: type, in_step: int, **values) -> dict:
        if in_step == at_step:
            values.update({name: value for (kind, name), value in changed.items() if kind is cls})
        return values

    writer.emit(DynamoCompileEvent, **fields(DynamoCompileEvent, at_step, t=0.1, compile_id="0/0", is_ca_graph=False, step=0, co_name="forward",
                                              entire_frame_compile_time_s=0.25))
    for step in range(steps):
        t = 0.5 + 0.01 * step
        writer.emit(BackwardEvent, **fields(BackwardEvent, step, t=t, step=step, index=0, backward_s=0.002, loss=1.0 / (step + 1)))
        writer.emit(OptimizerStepEvent, **fields(OptimizerStepEvent, step, t=t, step=step, wall_s=0.001, optimizer="SGD"))
        writer.emit(StepEvent, **fields(StepEvent, step, t=t, step=step, backward_s=0.002, loss=1.0 / (step + 1), wall_s=None if step == 0 else 0.01,
                                        boundary="optimizer", optimizer_s=0.001))
    writer.close()
    if manifest_fields:
        path = root / "ca" / "manifest.json"
        data = json.loads(path.read_text())
        for dotted, value in manifest_fields.items():
            *parents, name = dotted.split(".")
            holder = data
            for parent in parents:
                holder = holder[parent]
            holder[name] = value
        path.write_text(json.dumps(data))
    if not columns:
        (root / "ca" / "columns.json").unlink()
    else:
        assert (root / "ca" / "columns.json").is_file()
    write_run_meta(root, RunMeta(run_id=root.name, created_at=created_at, cagtool_argv=["run", "train.py"], target={"kind": "script", "name": "train.py"},
                                 target_argv=["train.py"], cwd=str(root), modes=["ca"], versions={"torch": "2.13.0"}, machine={},
                                 status="finished", exit_code=0, mode_exit_codes={"ca": 0}))
    return root


def _refused(args: tuple[str, ...], *said: str, cwd: Path | None = None) -> str:
    code, out, err = cagtool(*map(str, args), cwd=cwd)
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, (args, code, err[-2000:])
    for words in said:
        assert words in err, (words, err)
    return err


def _strict_json(text: str):
    """The document, refusing what is not JSON (json.loads reads a bare NaN or Infinity)."""
    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# ---- figures of the events ----------------------------------------------------------------------


# (event class, field), the value, what the refusal says, and what reads that figure (every report
# reads the step figures; the timeline export reads each backward call's and optimizer step's; the
# loader builds the compile events, which no sidecar holds, as it reads them).
STEP_READERS = (("summary",), ("summary", "--format", "json"), ("gate", "--no-config", "--max-ca-graphs", "1"))
TIMELINE = (("export", "--perfetto", "{tmp}/trace.json"),)
OUT_OF_RANGE = [
    ((StepEvent, "wall_s"), math.nan, "the step event's wall_s is NaN", STEP_READERS),
    ((StepEvent, "wall_s"), math.inf, "wall_s is inf", STEP_READERS),
    ((StepEvent, "wall_s"), -0.5, "wall_s is -0.5", STEP_READERS),
    ((StepEvent, "wall_s"), 1e-300, "wall_s is 1e-300", STEP_READERS),
    ((StepEvent, "wall_s"), 1e308, "wall_s is 1e+308", STEP_READERS),
    ((StepEvent, "cpu_s"), -1.0, "cpu_s is -1.0", STEP_READERS),
    ((BackwardEvent, "backward_s"), 2e6, "backward_s is 2000000.0", TIMELINE),
    ((OptimizerStepEvent, "wall_s"), 1e-12, "wall_s is 1e-12", TIMELINE),
    ((DynamoCompileEvent, "entire_frame_compile_time_s"), 1e308, "entire_frame_compile_time_s is 1e+308", STEP_READERS),
]


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "lines"])
@pytest.mark.parametrize("field, value, said, readers", OUT_OF_RANGE, ids=[f"{f[0].kind}.{f[1]}={v}" for f, v, _, _ in OUT_OF_RANGE])
def test_an_event_figure_out_of_its_range_refuses_the_record(tmp_path, field, value, said, readers, columns):
    """Read from the lines or from the sidecar (both forged together: the sidecar's check is a CRC
    of the lines), the commands that read the figure exit 3 with one line naming events.jsonl, the
    field and the value, where NaN, negative and absurd step times were left out as unknown ("no
    steady-state steps") and 1e-300 s read as a speed-up. A sidecar's column is checked when a
    command reads it (a report over many records reads the few columns it uses)."""
    run = write_run(tmp_path / "run", changed={field: value}, columns=columns)
    events = run / "ca" / "events.jsonl"
    for command, *options in readers:
        args = (command, run, *(option.format(tmp=tmp_path) for option in options))
        err = _refused(args, str(events), said, "outside its range" if not math.isnan(value) else "no number")
        assert "no recorder writes that (a damaged or forged record)" in err


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "lines"])
def test_figures_at_the_edges_of_their_range_and_a_diverged_loss_are_read(tmp_path, columns):
    """0 s (a clock coarser than the step), a nanosecond and eleven days are step times; a NaN or
    infinite loss is what a diverged job logs, a figure of the job's, not of the clock: all read,
    exit 0, and `--format json` is JSON (no bare NaN)."""
    for name, wall in (("zero", 0.0), ("tick", 1e-9), ("days", 1e6)):
        run = write_run(tmp_path / name, changed={(StepEvent, "wall_s"): wall, (StepEvent, "loss"): math.nan, (BackwardEvent, "loss"): math.inf},
                        columns=columns)
        code, out, err = cagtool("summary", str(run))
        assert code == 0, err[-2000:]
        code, out, err = cagtool("summary", str(run), "--format", "json")
        assert code == 0, err[-2000:]
        _strict_json(out)


# ---- figures of the manifest --------------------------------------------------------------------


MANIFEST_CASES = [
    ("peak_rss_bytes", -5, "`$.peak_rss_bytes` (it holds -5)"),
    ("peak_rss_bytes", 2**70, "`$.peak_rss_bytes` (it holds 1180591620717411303424)"),
    ("peak_device_memory_bytes", -1, "`$.peak_device_memory_bytes` (it holds -1)"),
    ("duration_s", "NaN", "`$.duration_s` (it holds nan)"),
    ("duration_s", "-Infinity", "`$.duration_s` (it holds -inf)"),
    ("options.waited_to_start_s", -3.0, "`$.options.waited_to_start_s` (it holds -3.0)"),
]


@pytest.mark.parametrize("name, value, said", MANIFEST_CASES, ids=[f"{n}={v}" for n, v, _ in MANIFEST_CASES])
def test_a_manifest_figure_out_of_its_range_refuses_the_record(tmp_path, name, value, said):
    """A peak memory of -5 bytes passed `--max-memory-ratio baseline:1.1` ("-0.000x"), a duration of
    NaN printed "finished in nan s": refused, exit 3, one line naming the manifest, the field and
    the value, as a baseline's figures are."""
    good = write_run(tmp_path / "good")
    baseline = tmp_path / "baseline.json"
    code, _, err = cagtool("baseline", "save", str(good), "-o", str(baseline))
    assert code == 0, err
    forged = {name: value} if not isinstance(value, str) else {name: 0.5}
    run = write_run(tmp_path / "run", manifest_fields=forged)
    if isinstance(value, str):  # json's spelling of a float no JSON holds
        path = run / "ca" / "manifest.json"
        path.write_text(path.read_text().replace(f'"{name}": 0.5', f'"{name}": {value}'))
    manifest = run / "ca" / "manifest.json"
    for args in (("summary", run), ("gate", run, "--no-config", "--baseline", baseline, "--max-memory-ratio", "baseline:1.1"),
                 ("baseline", "save", run, "-o", tmp_path / "other.json")):
        _refused(args, f"mode manifest {manifest} is malformed", said)


# ---- numbers json will not read -------------------------------------------------------------------


def test_an_integer_of_thousands_of_digits_is_unreadable_input_not_an_internal_error(tmp_path):
    """json refuses an integer of more than 4300 digits with a ValueError that is not a
    JSONDecodeError: every command that read one ended in `internal error: AttributeError` (exit 4).
    It is one line naming the file, exit 3, in run.json, a manifest and a baseline alike."""
    huge = "1" + "0" * 5000
    run = write_run(tmp_path / "run")
    (run / "run.json").write_text((run / "run.json").read_text().replace('"exit_code": 0', f'"exit_code": {huge}', 1))
    said = "is not valid JSON (Exceeds the limit (4300 digits) for integer string conversion"
    _refused(("summary", run), f"run record {run / 'run.json'} {said}")
    _refused(("gate", run, "--no-config", "--max-ca-graphs", "1"), f"run record {run / 'run.json'} {said}")
    run = write_run(tmp_path / "run2", manifest_fields={"peak_rss_bytes": 7})
    manifest = run / "ca" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"peak_rss_bytes": 7', f'"peak_rss_bytes": {huge}'))
    _refused(("summary", run), f"mode manifest {manifest} {said}")
    baseline = tmp_path / "baseline.json"
    assert cagtool("baseline", "save", str(write_run(tmp_path / "good")), "-o", str(baseline))[0] == 0
    baseline.write_text(baseline.read_text().replace('"steps": 8', f'"steps": {huge}', 1))
    _refused(("baseline", "show", baseline), f"baseline {baseline} {said}")
    _refused(("gate", tmp_path / "good", "--no-config", "--baseline", baseline, "--max-ca-graphs", "1"), f"baseline {baseline} {said}")


# ---- the latest run -------------------------------------------------------------------------------


def _after_the_clock_moves(reference: Path, scratch: Path) -> None:
    """Returns once a file written now gets a later change time than `reference`'s (the kernel's
    file clock ticks in milliseconds): the next file written is newer, without a fixed sleep."""
    while True:
        scratch.write_text("tick")
        if os.stat(scratch).st_ctime_ns > os.stat(reference).st_ctime_ns:
            return


@pytest.mark.parametrize("says", ["2099-01-01T00:00:00+00:00", "in four minutes"])
def test_the_latest_run_is_the_newest_written_never_the_one_whose_run_json_says_so(tmp_path, says):
    """A pull request's checkout plants `.cagtool/runs/planted` before CI records its run: a
    run.json saying it began in 2099 (or a few minutes ahead, within any clock's skew) was read as
    the latest run, and `gate`, `baseline save`, `summary` with no RUN judged it instead of CI's.
    It is as new as its file at most: the run recorded after it is the latest, and `runs` lists
    the planted one before it."""
    work = tmp_path / "work"
    runs = work / ".cagtool" / "runs"
    planted_at = says if "T" in says else datetime.fromtimestamp(datetime.now(timezone.utc).timestamp() + 240, timezone.utc).isoformat(timespec="seconds")
    planted = write_run(runs / "planted", created_at=planted_at, steps=3)
    _after_the_clock_moves(planted / "run.json", tmp_path / "tick")
    fresh = write_run(runs / "ci-run", created_at=_now(), steps=8)
    code, out, err = cagtool("summary", "--format", "json", cwd=work)
    assert code == 0 and json.loads(out)["run"].endswith("ci-run"), (code, err[-2000:])
    code, out, err = cagtool("gate", "--no-config", "--max-ca-graphs", "1", cwd=work)
    assert code == 0 and "ci-run" in out + err and "planted" not in out + err, (out, err)
    code, out, err = cagtool("baseline", "save", "-o", str(tmp_path / "b.json"), cwd=work)
    assert code == 0 and json.loads((tmp_path / "b.json").read_text())["source_run"].endswith("ci-run"), err
    code, out, err = cagtool("runs", cwd=work)
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert code == 0 and [Path(p).name for p in listed] == ["planted", "ci-run"], out
    assert fresh.name == "ci-run"


def test_runs_are_listed_in_the_order_they_began(tmp_path):
    """Runs recorded one after the other are listed oldest first, and the latest is the last begun,
    as before: the change time only bounds what a run.json says."""
    runs = tmp_path / "runs"
    first = write_run(runs / "b-first", created_at="2026-01-01T00:00:00+00:00", steps=2)
    _after_the_clock_moves(first / "run.json", tmp_path / "tick")
    write_run(runs / "a-second", created_at="2026-01-02T00:00:00+00:00", steps=2)
    code, out, err = cagtool("runs", str(runs))
    assert code == 0 and [Path(line.split()[0]).name for line in out.splitlines()[1:]] == ["b-first", "a-second"], out
    code, out, err = cagtool("summary", "--format", "json", env={"CAGTOOL_RUNS_DIR": str(runs)})
    assert code == 0 and json.loads(out)["run"].endswith("a-second"), err


# ---- cagtool import ---------------------------------------------------------------------------------


_GRAPH = "class CompiledAutograd0(torch.nn.Module):\n    def forward(self, inputs, sizes, scalars, hooks, packed_data):\n        getitem = inputs[0]\n        return []\n"


def _log(path: Path, compile_times: list[str]) -> Path:
    """A TORCH_TRACE log as torch writes one (glog prefix, JSON envelope, tab-prefixed payload
    with its md5): a compiled-autograd graph, then one compile per time in `compile_times` (json's
    spelling: "1e308", "NaN")."""
    import hashlib

    digest = hashlib.md5(_GRAPH.rstrip("\n").encode()).hexdigest()
    lines = ['V1202 01:36:00.100000 4242 torch/_dynamo/compiled_autograd.py:1] {"compiled_autograd_graph": {}, "compiled_autograd_id": 0, '
             f'"frame_id": 0, "frame_compile_id": 0, "attempt": 0, "has_payload": "{digest}"}}']
    lines += ["\t" + line for line in _GRAPH.rstrip("\n").split("\n")]
    for index, seconds in enumerate(compile_times, 1):
        lines.append(f'V1202 01:36:0{index}.000000 4242 torch/_dynamo/utils.py:1] {{"compilation_metrics": {{"co_name": "f{index}", '
                     f'"entire_frame_compile_time_s": {seconds}}}, "frame_id": {index}, "frame_compile_id": 0, "attempt": 0}}')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("seconds", ["1e308", "NaN", "-5", "1e-300"])
def test_import_leaves_a_compile_time_out_of_range_unknown_and_says_so(tmp_path, seconds):
    """A crafted log's compile time of 1e308 s or NaN was written into the record: `summary` then
    printed a 300-digit compile time or "nan s". Import leaves it unknown, counts it and says which
    (as it skips a bad line), and the record reads (`--format json` is JSON); --strict refuses the
    log, exit 3, one line naming it, the line and the value."""
    log = _log(tmp_path / "trace" / "dedicated_log_torch_trace_rank_0_x.log", ["0.5", seconds])
    out = tmp_path / "imported"
    code, _, err = cagtool("import", str(log.parent), "-o", str(out))
    assert code == 0 and "left 1 out-of-range figure(s) unknown" in err and f"{log}: line 7: dynamo_compile entire_frame_compile_time_s is" in err, err
    code, text, err = cagtool("summary", str(out))
    assert code == 0 and "nan" not in text.lower() and "e+30" not in text and "00000000" not in text, text
    code, text, err = cagtool("summary", str(out), "--format", "json")
    assert code == 0, err
    _strict_json(text)
    manifest = json.loads((out / "imported" / "manifest.json").read_text())
    assert manifest["imported"]["bad_figures"] == 1
    _refused(("import", log.parent, "-o", tmp_path / "strict", "--strict"), f"{log}: line 7: dynamo_compile entire_frame_compile_time_s is", "(--strict)")


def test_import_refuses_a_log_whose_name_says_a_rank_beyond_any_job(tmp_path):
    """`..._rank_99999999999999999999_...` imported, and every reader then refused the record ("rank
    ... is beyond any job's"): import refuses it first, exit 3, naming the log, and writes nothing
    a reader would refuse."""
    _log(tmp_path / "trace" / "dedicated_log_torch_trace_rank_0_a.log", ["0.5"])
    odd = _log(tmp_path / "trace" / "dedicated_log_torch_trace_rank_99999999999999999999_a.log", ["0.5"])
    _refused(("import", tmp_path / "trace", "-o", tmp_path / "imported"), f"{odd}: its name says rank 99999999999999999999, beyond any job's")
    assert not (tmp_path / "imported").exists()
