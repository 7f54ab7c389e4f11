"""A backward AOTAutograd compiles at its first call (Inductor's lazy backward: seconds, where the
forward's frame compile is a fraction of that) is compile time of the aot mode, as torch's own
metrics count it: without it, plain torch.compile read ~5x cheaper to compile than compiled
autograd, whose CA graph holds the backward. A gate against a baseline saved before it was counted
compares like with like. A real `cagtool run` of a real torch job, held to torch's own metrics."""

from __future__ import annotations

import json

from conftest import cli_in_process as cagtool

from cagtool.record.loader import load_run
from cagtool.record.schema import BackwardCompileEvent, DynamoCompileEvent
from cagtool.report.figures.metrics import mode_metrics


def _torchs(stdout: str) -> list[dict]:
    line = next(line for line in stdout.splitlines() if line.startswith("METRICS "))
    return json.loads(line[len("METRICS "):])


def test_the_aot_modes_compile_time_holds_the_backward_compiled_at_its_first_call(record_run, tmp_path):
    recorded = record_run("../tests/scripts/lazy_backward_compile.py", modes="aot", backend="aot_eager")
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    torchs = _torchs(recorded.stdout)
    forward = [m for m in torchs if m["is_forward"]]
    backward = [m for m in torchs if m["is_forward"] is False]
    assert len(forward) == 1 and len(backward) == 1, torchs
    record = load_run(recorded.path).modes["aot"]
    [compiled] = record.of(BackwardCompileEvent)
    assert compiled.compile_id == backward[0]["compile_id"] == "0/0" and compiled.step == 0
    assert abs(compiled.compile_time_s - backward[0]["backward_cumulative_compile_time_us"] * 1e-6) < 1e-9
    [frame] = record.of(DynamoCompileEvent)
    m = mode_metrics(record)
    assert abs(m.compile_time_s - (frame.entire_frame_compile_time_s + compiled.compile_time_s)) < 1e-9
    assert abs(m.compile_phases_s["backward"] - compiled.compile_time_s) < 1e-12
    code, out, err = cagtool("compare", str(recorded.path), "--format", "json")
    assert code == 0, err
    fields = json.loads(out)["modes"]["aot"]
    assert abs(fields["compile_backward_s"] - compiled.compile_time_s) < 1e-6
    assert abs(fields["compile_time_s"] - m.compile_time_s) < 1e-6

    # A baseline saved before backward compiles were counted: its compile time left them out, and
    # the gate compares this run's without them, said in a note.
    baseline = tmp_path / "baseline.json"
    code, _, err = cagtool("baseline", "save", str(recorded.path), "-o", str(baseline))
    assert code == 0, err
    data = json.loads(baseline.read_text())
    assert abs(data["modes"]["aot"]["backward_compile_s"] - compiled.compile_time_s) < 1e-6
    data["modes"]["aot"].pop("backward_compile_s")
    data["modes"]["aot"]["compile_time_s"] = frame.entire_frame_compile_time_s
    baseline.write_text(json.dumps(data))
    code, out, err = cagtool("gate", str(recorded.path), "--baseline", str(baseline), "--max-compile-regression", "50%", "--format", "json")
    [check] = [c for c in json.loads(out)["checks"] if c["check"] == "max-compile-regression" and c["mode"] == "aot"]
    assert "saved before cagtool counted the backwards AOTAutograd compiles at their first call" in " ".join(check["notes"]), check
    assert check["outcome"] != "FAIL", check
