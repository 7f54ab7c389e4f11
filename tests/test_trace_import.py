"""`cagtool import` on logs that real jobs wrote: each test job runs with TORCH_TRACE set and no
cagtool (tests/scripts/trace_jobs/), prints torch's own counters, and the imported record's counts
must equal them. Also: lenient and --strict reading, corrupt input, and the report commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_in_process, recorded_once

from cagtool.record.loader import load_run
from cagtool.record.schema import CacheMissEvent, CAGraphEvent, DynamoCompileEvent, DynamoRecompileEvent
from cagtool.report.figures.metrics import mode_metrics

JOBS = ROOT / "tests" / "scripts" / "trace_jobs"


def _start_job(script: str, trace_dir: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAGTOOL")}
    env["TORCH_TRACE"] = str(trace_dir)
    env.pop("TORCH_LOGS", None)
    return subprocess.Popen([sys.executable, str(JOBS / script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish_job(proc: subprocess.Popen, timeout: int = 300) -> str:
    """The job's stdout, once it ended with exit code 0."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        proc.kill()  # a no-op once it ended
    assert proc.returncode == 0, stderr[-3000:]
    return stdout


def _job(script: str, trace_dir: Path, *args: str, timeout: int = 300) -> str:
    return _finish_job(_start_job(script, trace_dir, *args), timeout)


def _import(*args: str) -> subprocess.CompletedProcess:
    return cagtool_in_process("import", *args)


def _cli(*args: str) -> subprocess.CompletedProcess:
    """In-process (cagtool_in_process): import and the report commands read logs and records."""
    return cagtool_in_process(*args)


def _record_single_logs(base: Path) -> dict:
    jobs = {}
    for name, extra in (("plain", ()), ("verbose", ("verbose",))):  # independent jobs: side by side
        (base / f"trace-{name}").mkdir()
        jobs[name] = _start_job("single_job.py", base / f"trace-{name}", *extra)
    return {name: json.loads(_finish_job(proc).strip().splitlines()[-1]) for name, proc in jobs.items()}


@pytest.fixture(scope="module")
def single_logs(tmp_path_factory):
    """The single-process job, with and without compiled_autograd_verbose: (trace dir, counters)
    (the jobs run once for all xdist workers, each with its own copy of the logs)."""
    base, counters = recorded_once(tmp_path_factory, "trace-single", _record_single_logs)
    return {name: (base / f"trace-{name}", counters[name]) for name in ("plain", "verbose")}


@pytest.fixture(scope="module")
def ddp_logs(tmp_path_factory):
    trace = tmp_path_factory.mktemp("trace-ddp")
    port = str(29500 + os.getpid() % 500)
    _job("ddp_job.py", trace, str(trace), port)
    counters = {r: json.loads((trace / f"counters_rank{r}.json").read_text()) for r in (0, 1)}
    return trace, counters


def _check_counts(record, counters: dict) -> int:
    metrics = mode_metrics(record)
    assert metrics.ca_graphs == counters["compiled_autograd"]["captures"]
    assert metrics.graph_breaks == sum(counters.get("graph_break", {}).values())
    # unique_graphs counts Dynamo's graphs: the forward frames' and the CA graphs' compiles
    assert metrics.forward_graphs + sum(1 for d in record.of(DynamoCompileEvent) if d.is_ca_graph and d.graph_op_count) == counters["stats"]["unique_graphs"]
    # every Dynamo compile after a frame's first is a recompile
    frames_recompiled = sum(1 for d in record.of(DynamoCompileEvent) if not d.compile_id.endswith("/0"))
    assert len(record.of(DynamoRecompileEvent)) == frames_recompiled
    return frames_recompiled


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["plain", "verbose"])
def test_single_process_counts_equal_torch_counters(single_logs, tmp_path, variant):
    trace, counters = single_logs[variant]
    proc = _import(str(trace), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "run")
    assert list(run.modes) == ["imported"] and run.meta.options["imported"] is True
    record = run.mode()
    assert _check_counts(record, counters) == 3
    misses = record.of(CacheMissEvent)
    graphs = record.of(CAGraphEvent)
    assert [m.compile_id for m in misses] == [g.compile_id for g in graphs] == ["!0", "!1", "!2", "!3"]
    assert all(m.step is None for m in misses)  # a log has no steps: unknown, not invented
    kinds = [m.miss_kind for m in misses]
    assert kinds == ["new_node", "new_node", "changed_shapes", "new_node"]
    if variant == "verbose":
        assert not any(m.inferred for m in misses)
        assert misses[2].message.startswith("Cache miss due to 6 changed tensor shapes")
        assert record.manifest.imported["ca_reasons"] == "logged"
    else:
        assert all(m.inferred for m in misses) and "inferred" in proc.stderr
        assert record.manifest.imported["ca_reasons"] == "inferred"
        assert misses[3].node == "torch::autograd::AccumulateGrad"  # the parameter that got a hook
    assert graphs[3].hooks and graphs[3].hooks[0].hook_type == "tensor_pre_hook"
    assert graphs[2].num_sizes == 6  # sizes became dynamic after the shape change
    assert all(g.capture_s > 0 for g in graphs)  # torch's own compiled_autograd span
    for g in graphs:
        assert (record.path / g.code_file).read_text().startswith(f"class CompiledAutograd{g.ca_id}")
    assert "step times" in record.manifest.imported["not_in_log"]


@pytest.mark.slow
def test_report_commands_read_an_imported_run(single_logs, tmp_path):
    trace, _ = single_logs["plain"]
    run = tmp_path / "run"
    assert _import(str(trace), "-o", str(run)).returncode == 0
    summary = _cli("summary", str(run))
    assert summary.returncode == 0, summary.stderr
    assert "cagtool import" in summary.stdout and "not in a log: step times" in summary.stdout
    assert "inferred from the graph diff" in summary.stdout
    # What a log does not hold is not a zero: no torch capture count, no steps, and the first
    # line is what the log says (its recompiles and their causes), not "nothing to compare".
    first = summary.stdout.splitlines()[0]
    assert "torch counted" not in summary.stdout and first.startswith("3 CA recompiles (!1 is the .grad warm-up (captured once), not counted by gate --max-recompiles) "
                                                                 "and 3 Dynamo recompiles, from "), first
    assert "imported: 4 CA graphs" in first and "nothing to compare" not in summary.stdout
    data = json.loads(_cli("summary", str(run), "--format", "json").stdout)
    assert data["ca_graphs"] == 4 and data["graph_breaks"] == 4
    assert data["modes"]["imported"]["imported"]["ca_reasons"] == "inferred"
    explain = _cli("recompiles", "--explain", str(run))
    assert explain.returncode == 0, explain.stderr
    assert "hook was added" in explain.stdout and "inferred from the diff" in explain.stdout
    assert explain.stdout.startswith("mode imported: 6 recompiles (CA: 3,") and " in 0 steps" not in explain.stdout
    diff = _cli("diff-graphs", str(run), "2", "3")
    assert diff.returncode == 1 and "hooks: +tensor_pre_hook" in diff.stdout
    gate = _cli("gate", str(run), "--max-recompiles", "0")
    assert gate.returncode == 1 and "max-recompiles" in gate.stdout
    assert _cli("gate", str(run), "--max-ca-graphs", "4", "--mode", "imported").returncode == 0


@pytest.mark.slow
def test_an_imported_recompile_names_the_users_call_from_the_logged_stack(single_logs, tmp_path):
    """torch logs a compile's stack (`dynamo_start`) just after the recompile reasons: the resume
    function after the graph break in `with_break` is recompiled from the script's
    `compiled(torch.randn(3, 3))` (single_job.py), which the recompile names; a top-level compiled
    function's stack has no caller, and the function itself is named."""
    trace, _ = single_logs["plain"]
    run = tmp_path / "run"
    assert _import(str(trace), "-o", str(run)).returncode == 0
    rows = json.loads(_cli("recompiles", str(run), "--format", "json").stdout)["modes"]["imported"]["recompiles"]
    lines = {r["compile_id"]: r["source_line"] for r in rows if r["source"] == "dynamo_frame"}
    job = (JOBS / "single_job.py").read_text().splitlines()
    resume = lines["7/1"]
    assert resume["how"] == "caller" and job[resume["line"] - 1].strip() == resume["code"] == "compiled(torch.randn(3, 3))"
    assert lines["0/1"]["how"] == "compiled_frame" and lines["0/1"]["function"] == "train_step"


@pytest.mark.slow
def test_two_ranks_over_gloo(ddp_logs, tmp_path):
    trace, counters = ddp_logs
    proc = _import(str(trace), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "run")
    main = run.mode("imported")
    ranks = main.ranks()
    assert sorted(ranks) == [0, 1]
    assert (tmp_path / "run" / "imported" / "procs" / "rank1" / "manifest.json").exists()
    for rank, record in ranks.items():
        _check_counts(record, counters[rank])
        assert record.manifest.process["world_size"] == 2
    # rank 1 changed shape on its last step: one more CA graph than rank 0
    assert mode_metrics(ranks[1]).ca_graphs == mode_metrics(ranks[0]).ca_graphs + 1
    hooks = {h.hook_type for g in ranks[0].of(CAGraphEvent) for h in g.hooks}
    assert hooks == {"post_acc_grad_hook"}  # DDP's python reducer, traced into the CA graph


def _copy_log(trace: Path, dest: Path) -> Path:
    log = next(trace.glob("dedicated_log_torch_trace*.log"))
    dest.write_bytes(log.read_bytes())
    return dest


@pytest.mark.slow
def test_lenient_by_default_strict_on_request(single_logs, tmp_path):
    trace, counters = single_logs["plain"]
    log = _copy_log(trace, tmp_path / "dedicated_log_torch_trace_x.log")
    data = log.read_bytes()
    unknown = b'V1123 10:00:00.000000 1 torch/x.py:1] {"brand_new_envelope": {}, "frame_id": 0}\n'
    cut = data.rindex(b"\nV") + 1
    log.write_bytes(data[:cut] + unknown + data[cut:-20])  # an unknown envelope, and the last line cut short
    proc = _import(str(log), "-o", str(tmp_path / "lenient"))
    assert proc.returncode == 0, proc.stderr
    assert "1 unknown envelope(s): brand_new_envelope" in proc.stderr and "truncated" in proc.stderr
    record = load_run(tmp_path / "lenient").mode()
    assert record.manifest.imported["truncated_last_line"] is True
    assert record.manifest.imported["unknown_envelopes"] == {"brand_new_envelope": 1}
    assert mode_metrics(record).ca_graphs == counters["compiled_autograd"]["captures"]
    strict = _import(str(log), "-o", str(tmp_path / "strict"), "--strict")
    assert strict.returncode == 3
    assert strict.stderr.count("\n") == 1 and "unknown envelope 'brand_new_envelope'" in strict.stderr
    log.write_bytes(data[:-20])  # only the truncation left
    strict = _import(str(log), "-o", str(tmp_path / "strict2"), "--strict")
    assert strict.returncode == 3 and "truncated" in strict.stderr and strict.stderr.count("\n") == 1


def test_corrupt_or_missing_input_is_one_line_exit_3(tmp_path):
    garbage = tmp_path / "dedicated_log_torch_trace_bad.log"
    garbage.write_bytes(os.urandom(4096))
    for target in (garbage, tmp_path / "nope", tmp_path):
        proc = _import(str(target), "-o", str(tmp_path / f"out-{target.name}"))
        assert proc.returncode == 3, (target, proc.stderr)
        assert proc.stderr.startswith("cagtool: error:") and proc.stderr.count("\n") == 1


@pytest.mark.slow
def test_block_boundaries_do_not_change_what_is_read(single_logs, monkeypatch):
    """The reader scans 8 MiB blocks; with tiny blocks every envelope and payload straddles one."""
    from cagtool.trace_import import log_reader

    log = next(single_logs["verbose"][0].glob("dedicated_log_torch_trace*.log"))

    def read() -> tuple[list, log_reader.ReadStats]:
        reader = log_reader.TraceLogReader(log)
        return [(e.kind, e.line, e.data, e.payload) for e in reader.envelopes()], reader.stats

    whole, whole_stats = read()
    monkeypatch.setattr(log_reader, "_BLOCK", 997)
    small, small_stats = read()
    assert small == whole and len(whole) == whole_stats.envelopes > 100
    assert small_stats.lines == whole_stats.lines == len(log.read_bytes().splitlines())
    assert whole_stats.payload_mismatches == 0 and whole_stats.bad_lines == 0


@pytest.mark.slow
def test_several_processes_without_ranks(single_logs, tmp_path):
    """A TORCH_TRACE directory shared by two processes (no rank in the names): main + procs/pid<N>."""
    trace = tmp_path / "trace"
    trace.mkdir()
    for variant in ("plain", "verbose"):
        _copy_log(single_logs[variant][0], trace / f"dedicated_log_torch_trace_{variant}.log")
    (trace / "dedicated_log_torch_trace_garbage.log").write_bytes(b"\x00\x01 not a log\n")
    proc = _import(str(trace), "-o", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    assert "skipped" in proc.stderr and "dedicated_log_torch_trace_garbage.log: not a TORCH_TRACE log" in proc.stderr
    main = load_run(tmp_path / "run").mode()
    assert len(main.processes) == 1 and next(iter(main.processes)).startswith("pid")
    assert main.manifest.process["role"] == "main"
    for record in (main, *main.processes.values()):
        assert mode_metrics(record).ca_graphs == single_logs["plain"][1]["compiled_autograd"]["captures"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_restarted_jobs_attempts_are_kept_apart(tmp_path):
    """torchrun --max-restarts 1, rank 1 dying once: each rank leaves one log per attempt, both
    named by the rank alone, each attempt's compiled-autograd ids counting from 0. Read as one
    stream they made a recompile per rank that never happened and failed `--max-recompiles ca:0`.
    Each attempt is a process record of its own; the ranks' figures are their last attempt's, and
    a finding says the rank was started twice."""
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAGTOOL")}
    env["TORCH_TRACE"] = str(trace)
    env.pop("TORCH_LOGS", None)
    job = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--max-restarts", "1",
                          "--monitor-interval", "0.1", "--master-port", str(_free_port()), str(ROOT / "tests" / "scripts" / "ddp_dies_once.py")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert job.returncode == 0, job.stderr[-3000:]
    printed = [json.loads(line) for line in job.stdout.splitlines() if line.startswith("{")]
    finished = {p["rank"]: p for p in printed if p["attempt"] == 1}
    assert sorted(finished) == [0, 1] and len(list(trace.glob("*rank_1_*.log"))) == 2
    out = tmp_path / "imported"
    proc = _import(str(trace), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    record = load_run(out).mode("imported")
    assert sorted(record.processes) == ["rank0", "rank1", "rank1.attempt1"]  # rank 0's last attempt is the main record
    for rank, last in record.ranks().items():
        assert last.attempt == 1 and [r.attempt for r in record.attempts(rank)] == [0, 1]
        assert mode_metrics(last).ca_graphs == finished[rank]["ca_captures"] == 1
        assert mode_metrics(last).ca_cache_misses == 1  # the first capture only: no recompile
    summary = _cli("summary", str(out))
    assert "rank 1 was started 2 times by its launcher" in " ".join(summary.stdout.split())
    gate = _cli("gate", str(out), "--max-recompiles", "ca:0")
    assert gate.returncode == 0, gate.stdout


@pytest.mark.slow
def test_deeply_nested_json_is_an_unreadable_line_skipped_and_counted(single_logs, tmp_path):
    """One envelope nested 200,000 deep (json's decoder raises RecursionError), and a payload as
    deep under an artifact envelope: each is an unreadable line, skipped and counted like any
    other, never an internal error; --strict makes the first one fatal (exit 3, its line)."""
    trace, counters = single_logs["plain"]
    log = _copy_log(trace, tmp_path / "dedicated_log_torch_trace_deep.log")
    data = log.read_bytes()
    prefix = data[: data.index(b"{")]
    deep = prefix + b'{"dynamo_start": ' + b"[" * 200_000 + b"\n"
    log.write_bytes(data + deep)
    proc = _import(str(log), "-o", str(tmp_path / "lenient"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipped 1 unreadable line(s)" in proc.stderr and "internal error" not in proc.stderr
    assert mode_metrics(load_run(tmp_path / "lenient").mode()).ca_graphs == counters["compiled_autograd"]["captures"]
    strict = _import(str(log), "-o", str(tmp_path / "strict"), "--strict")
    assert strict.returncode == 3 and strict.stderr.count("\n") == 1 and "line" in strict.stderr


def test_a_fifo_or_a_device_is_one_line_exit_3_never_a_hang(tmp_path):
    fifo = tmp_path / "dedicated_log_torch_trace_fifo.log"
    os.mkfifo(fifo)
    for target in (fifo, Path("/dev/zero")):
        proc = _import(str(target), "-o", str(tmp_path / f"out-{target.name}"))
        assert proc.returncode == 3, (target, proc.stderr)
        assert proc.stderr.count("\n") == 1 and f"{target} is not a regular file or a directory" in proc.stderr
        assert not (tmp_path / f"out-{target.name}").exists()


def test_a_link_in_a_log_folder_is_not_followed(single_logs, tmp_path):
    """A log folder handed over (a CI artifact) holding a link to a log elsewhere: the link is not
    read, and a folder of nothing but links holds no log (one line, exit 3, saying so)."""
    real = next(Path(single_logs["plain"][0]).glob("dedicated_log_torch_trace*.log"))
    folder = tmp_path / "handed-over"
    folder.mkdir()
    (folder / "dedicated_log_torch_trace_rank_0_x.log").symlink_to(real)
    proc = _import(str(folder), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds no TORCH_TRACE log" in proc.stderr and "1 symbolic link in it not followed" in proc.stderr
    assert not (tmp_path / "out").exists()
