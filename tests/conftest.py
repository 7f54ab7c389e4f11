"""Shared fixtures: real runs of the sample scripts (recorded once per session) and torch state resets."""

from __future__ import annotations

import fcntl
import importlib.metadata
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
# torch 2.14 compiles frames of Python's inspect module while compiled autograd captures a backward
# run inside a compiled function (docs/compat.md): sample_scripts/op_loop.py's record holds 10 Dynamo
# recompiles of torch's own there, one cause told apart (`inside_capture`). The suite's torch is
# 2.13 (0 here); the compat check runs the tests on 2.14.1 too. Read without importing torch.
TORCH_2_14 = importlib.metadata.version("torch").startswith("2.14.")
OP_LOOP_INSPECT_RECOMPILES = 10 if TORCH_2_14 else 0
SAMPLES = ROOT / "sample_scripts"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # An xdist worker starts with COLUMNS=80 and LINES=24 that the suite's own process does not
    # have: cagtool (and every `cagtool run` a test starts) would wrap its output at 80 columns,
    # unlike the same test run without xdist. Tests that want a width set COLUMNS themselves.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


# Started with SIGHUP ignored (`nohup`, some CI runners' background jobs), every process a test
# starts inherits that, and cagtool, like python, keeps an inherited SIG_IGN: the tests that send
# SIGHUP (a terminal closing) would test nohup instead and wait for a job that never stops. They
# model a terminal, so SIGHUP is the default again in the suite's processes; the nohup behaviour
# has tests of its own (test_stop_stacks.py, test_reliability.py).
if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# The same for SIGINT and SIGQUIT when a shell without job control started the suite in the
# background (`pytest ... &` in a script, a CI step's background job): both are ignored then,
# python installs no KeyboardInterrupt handler in a process that starts with SIGINT ignored, and
# the tests that send a terminal's Ctrl-C to a job would wait for a job that never stops.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if hasattr(signal, "SIGQUIT") and signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)



# What the suite's processes import: torch with Dynamo, Inductor's compiler, DDP and its launcher,
# and the libraries of cagtool's own parent process.
_WARM_IMPORTS = (
    "import torch, torch._dynamo, torch._inductor.compile_fx, torch.distributed.run, torch.nn.parallel, "
    "pandas, rich.console, typer, jinja2, cagtool.cli"
)


def _bytecode_for_the_suites_processes() -> None:
    """The suite starts ~260 torch processes, each importing ~4 s of CPU of torch from its .pyc
    files. README's test command installs with `pip install --no-compile`: compiling all of
    torch's ~4,000 modules at install costs ~35 s more, most of it for modules no test imports.
    The suite's first process instead writes the .pyc files of what its processes import, once,
    before the workers start (~14 s; the rest is written by the first process that imports it).
    With PYTHONDONTWRITEBYTECODE set (some CI images and shells set it) no process writes .pyc
    files, and each would compile what it imports from source (12 s instead of 4 s per torch
    process): then everything installed is compiled here, in parallel, as pip would have. Reading
    a .pyc is allowed under the flag, only writing is not. A venv that pip compiled is left as it
    is, and so are cagtool's own modules when the flag is not set."""
    import importlib.util
    import sysconfig

    spec = importlib.util.find_spec("torch")  # found, not imported
    if spec is not None and spec.origin and not os.path.exists(importlib.util.cache_from_source(spec.origin)):
        if sys.flags.dont_write_bytecode:  # compileall writes under the flag; an import would not
            cmd = [sys.executable, "-m", "compileall", "-q", "-j", "0", sysconfig.get_paths()["purelib"]]
        else:
            cmd = [sys.executable, "-c", _WARM_IMPORTS]
        subprocess.run(cmd, cwd=str(ROOT), stdout=subprocess.DEVNULL, check=False)
    if sys.flags.dont_write_bytecode:
        import compileall

        compileall.compile_dir(str(ROOT / "cagtool"), quiet=1)


def pytest_configure(config) -> None:
    if not hasattr(config, "workerinput"):  # the suite's first process, before xdist's workers
        _bytecode_for_the_suites_processes()


def pytest_sessionfinish(session, exitstatus) -> None:
    """The browser tests' screenshots, staged in the session's directory while jobs were recorded
    (report/html/test_html_report.py, `screenshots`), copied into $CAGTOOL_SCREENSHOTS once every
    worker is done: by the suite's first process."""
    target = os.environ.get("CAGTOOL_SCREENSHOTS")
    factory = getattr(session.config, "_tmp_path_factory", None)
    if not target or hasattr(session.config, "workerinput") or factory is None:
        return
    staged = factory.getbasetemp() / "screenshots"
    if staged.is_dir():
        Path(target).mkdir(parents=True, exist_ok=True)
        for shot in staged.iterdir():
            if shot.is_file():
                shutil.copy2(shot, Path(target) / shot.name)


# The order the suite runs in: the slowest tests start first, each xdist worker on its own share of
# them.
#
# pytest-xdist's worksteal hands worker k the k-th contiguous chunk of the collected order (sizes
# N // W, then the rest's // (W - 1), ...), and an idle worker later takes the back half of the
# fullest queue: what starts a chunk always runs first on that worker, and what ends one is shared.
# So the slow tests are dealt to the chunks, the listed ones first, heaviest first, each to the
# chunk that holds the least time so far (longest processing time first), each chunk starting with
# its own; quick tests fill the chunks behind them. A 100 s fixture then starts at once, beside the
# other heavy ones, not queued behind them on one worker or taken up last by a worker that stole it.
#
# SLOWEST holds the tests that took longest in recent runs of README's test command (`--durations`
# prints them at the end of every run): seconds of wall time beside the other workers, which only
# weigh them against each other. An entry naming a file moves all its tests that nothing more
# specific names as one group (they share a module-scoped fixture, made once); an entry naming a
# test moves each of its parametrizations on its own. The other `slow` tests move by file, after
# the listed ones of their chunk, each weighed UNLISTED_SLOW_S (a guess: most read records made
# once per session); quick tests keep their files' order and fill the chunks.
SLOWEST: dict[str, float] = {
    "tests/report/recompiles/test_checkpointing_measured.py": 120.0,  # an aot,ca run and its 4 re-runs
    "tests/report/recompiles/test_checkpointing_measured.py::test_reentrant_under_ca_recompiles_in_its_recompute_and_use_reentrant_false_fixes_it": 80.0,
    "tests/test_grad_parity_run.py::test_inductor_dropout_is_not_comparable_without_parity_and_agrees_with_it": 70.0,
    "tests/report/gate/test_gate_copies.py": 65.0,  # 7 processes of one mode
    "tests/report/gate/test_gate_one_run_a_side.py": 50.0,
    "tests/test_steps.py::test_steps_stops_a_compiled_optimizer_step_where_eager_stops": 40.0,
    "tests/test_reliability.py::test_an_inductor_run_leaves_only_what_the_plain_job_keeps_per_machine_in_the_temporary_directory": 35.0,
    "tests/test_verify_confined.py::test_a_module_in_the_working_directory_is_never_run_as_cagtool": 35.0,
    "tests/test_verify_ddp.py::test_a_ddp_jobs_fix_is_measured_on_rank_0_with_exact_counts": 33.0,
    "tests/report/recompiles/test_ordinary_scripts.py::test_a_padded_length_names_every_input_it_ties_and_dynamic_sources_remove_it": 31.0,
}
UNLISTED_SLOW_S = 4.0


@dataclass
class _Group:
    cost: float
    listed: bool
    indices: list[int] = field(default_factory=list)


def _entry(nodeid: str, slowest: dict[str, float]) -> str | None:
    """The most specific entry of `slowest` naming the test `nodeid` (a file, a test, or one of its
    parametrizations), None where none does."""
    best = None
    for entry in slowest:
        if nodeid == entry or nodeid.startswith(entry + "::") or nodeid.startswith(entry + "["):
            if best is None or len(entry) > len(best):
                best = entry
    return best


def chunk_sizes(n: int, workers: int) -> list[int]:
    """The sizes of the contiguous chunks worksteal sends its `workers` workers first."""
    sizes = []
    for k in range(workers):
        size = n // (workers - k)
        sizes.append(size)
        n -= size
    return sizes


def run_order(tests: list[tuple[str, bool]], workers: int = 1, slowest: dict[str, float] = SLOWEST) -> list[int]:
    """The order to run `tests` ((node id, marked slow) in collection order) in, as indices into
    it, for `workers` xdist workers under worksteal (1: one process, or a scheduler that does not
    hand out contiguous chunks)."""
    groups: dict[str, _Group] = {}
    quick: list[int] = []
    for i, (nodeid, slow) in enumerate(tests):
        entry = _entry(nodeid, slowest)
        if entry is not None:
            key = entry if "::" not in entry else nodeid
            groups.setdefault(key, _Group(slowest[entry], True)).indices.append(i)
        elif slow:
            group = groups.setdefault(nodeid.split("::")[0], _Group(0.0, False))
            group.cost += UNLISTED_SLOW_S
            group.indices.append(i)
        else:
            quick.append(i)
    workers = max(1, min(workers, len(tests)))
    chunks: list[list[_Group]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for group in sorted(groups.values(), key=lambda g: (not g.listed, -g.cost, g.indices[0])):
        k = loads.index(min(loads))
        chunks[k].append(group)
        loads[k] += group.cost
    order: list[int] = []
    boundary = 0  # where the next chunk starts; a chunk its slow tests overfill ends later
    for k, size in enumerate(chunk_sizes(len(tests), workers)):
        boundary += size
        for group in chunks[k]:
            order.extend(group.indices)
        take = max(0, boundary - len(order)) if k < workers - 1 else len(quick)
        order.extend(quick[:take])
        del quick[:take]
    return order


def pytest_collection_modifyitems(config, items) -> None:
    """The slowest tests first (run_order): under README's `-n 3 --dist worksteal` each worker
    starts on its own share of them and the run ends on quick tests the workers share; in one
    process, the heaviest first. Every worker sorts the same collection the same way, as xdist
    requires."""
    workerinput = getattr(config, "workerinput", None)
    workers = int(workerinput["workercount"]) if workerinput and workerinput.get("cagtool_dist") == "worksteal" else 1
    order = run_order([(item.nodeid, item.get_closest_marker("slow") is not None) for item in items], workers)
    items[:] = [items[i] for i in order]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist's workers run with `--dist no`: each is told the scheduler that hands it its tests."""
    node.workerinput["cagtool_dist"] = node.config.getoption("dist")


@dataclass
class RecordedRun:
    path: Path  # the run directory
    returncode: int
    stdout: str
    stderr: str


def cagtool_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cagtool", *args]


def _session_dir(tmp_path_factory, name: str) -> Path:
    """A directory of this pytest session that every xdist worker sees: the workers' basetemps
    (`popen-gwN`) share the session's basetemp as parent; without xdist, the basetemp itself."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / name
    path.mkdir(exist_ok=True)
    return path


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One process at a time (xdist workers asking for the same recording wait for the first)."""
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def recorded_once(tmp_path_factory, name: str, record: Callable[[Path], Any]) -> tuple[Path, Any]:
    """The job a module-scoped fixture runs, run once per pytest session: xdist splits a module's
    tests between its workers, and each worker would run the module's fixture, so the job, again.
    The first to ask calls record(directory), which runs the job there and returns a JSON-able
    value (its exit code, its output); the others wait for it and read that value. Each caller gets
    its own copy of the directory, as each worker had its own recording: a test that writes into a
    record (`cagtool gate` keeps gate.json there) does not change what another worker's tests read.
    Returns (the copy, the value). (`@pytest.mark.xdist_group` with `--dist loadgroup` would keep a
    module on one worker instead, but pytest-xdist 3.8 groups nothing under pytest 9.2: it marks the
    group in `item._nodeid`, which pytest 9's `nodeid` no longer reads.)"""
    shared = _session_dir(tmp_path_factory, "recorded-once")
    slot = shared / name
    result = shared / f"{name}.json"
    with _exclusive(shared / f"{name}.lock"):
        if not result.is_file():
            shutil.rmtree(slot, ignore_errors=True)  # what a worker killed mid-recording left
            slot.mkdir()
            value = record(slot)
            result.write_text(json.dumps(value))
        value = json.loads(result.read_text())
    copy = tmp_path_factory.mktemp(name)
    shutil.copytree(slot, copy, symlinks=True, dirs_exist_ok=True)
    return copy, value


def torchrun_recorded(tmp_path_factory, name: str, script: str, *args: str, modes: str = "ca", backend: str = "eager") -> Path:
    """`cagtool run --modes MODES --backend BACKEND torchrun --standalone --nproc-per-node 2 SCRIPT ARGS`,
    recorded once per session (recorded_once), one intra-op thread a rank: the run's directory.
    Fails the test where the job did not exit 0."""
    def record(directory: Path) -> dict:
        proc = subprocess.run([sys.executable, "-m", "cagtool", "run", "--modes", modes, "--backend", backend, "--no-report", "-o",
                               str(directory / "r"), "torchrun", "--standalone", "--nproc-per-node", "2", script, *args],
                              capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "CI": "true"}, cwd=directory,
                              timeout=600)
        return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-4000:]}

    path, value = recorded_once(tmp_path_factory, name, record)
    assert value["rc"] == 0, value["stderr"]
    return path / "r"


def as_old_schema(fresh: Path, target: Path, version: int) -> Path:
    """A copy of a fresh run record as cagtool wrote it before schema 3, for the loader's
    conversions: every step number one higher, the old schema version in run.json and each mode's
    manifest, and for schema 1 also no backward events, step events without the schema-2 fields,
    and a forward frame's events stamped with the step last begun (None before the first backward)
    instead of the step in progress. No columns sidecar (an older cagtool wrote none)."""
    shutil.copytree(fresh, target)
    for path in [target / "run.json", *target.glob("*/manifest.json")]:
        data = json.loads(path.read_text())
        data["schema_version"] = version
        path.write_text(json.dumps(data))
    for mode in target.iterdir():
        if not (mode / "events.jsonl").is_file():
            continue
        lines = []
        for line in (mode / "events.jsonl").read_text().splitlines():
            event = json.loads(line)
            forward = isinstance(event.get("compile_id"), str) and not event["compile_id"].startswith("!")
            if version == 1 and forward and "step" in event:
                event["step"] = event["step"] or None  # in progress k (from 0) is last begun k (from 1)
            elif event.get("step") is not None:
                event["step"] += 1
            if version == 1:
                if event["kind"] == "backward":
                    continue
                if event["kind"] == "step":
                    for key in ("wall_s", "backward_calls", "boundary", "optimizer_s"):
                        event.pop(key, None)
            lines.append(json.dumps(event))
        (mode / "events.jsonl").write_text("\n".join(lines) + "\n")
        (mode / "columns.json").unlink(missing_ok=True)
    return target


def _started_under(pid: int, known: set[int] | frozenset[int] = frozenset()) -> dict[int, str]:
    """The live (not zombie) processes under `pid`, by pid, with their command lines, leaving out
    the subtrees of its children in `known` (a module's browser, started before, makes a renderer
    per page: that is the fixture's, not a leak)."""
    from cagtool.record.liveness import proc_stat

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(int(entry))
            if fields is not None and len(fields) > 1 and fields[0] != b"Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, str] = {}
    todo = [child for child in children.get(pid, ()) if child not in known]
    while todo:
        process = todo.pop()
        try:
            found[process] = Path(f"/proc/{process}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        todo.extend(children.get(process, ()))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed:
        item._cagtool_call_failed = True
    return report


@pytest.fixture(autouse=True)
def _ends_what_it_started(request):
    """A test that stops midway (an assertion, a timeout while it waits for `cagtool run` on an
    endless script) must not leave that job running on the machine, spinning a core under the
    next tests and benchmarks: what a test started and left alive is SIGKILLed after it, and the
    test fails naming it (a profiler's tests that leave processes behind hide the leak cagtool
    must never have). Processes the longer-lived fixtures started before the test, and theirs,
    are left alone; a process the test has just ended (killed, not yet reaped) is given a moment
    to finish exiting."""
    if not Path("/proc/self/stat").exists():
        yield
        return
    before = set(_started_under(os.getpid()))
    yield
    deadline = time.monotonic() + 10.0  # only for processes already exiting: one left running stays
    while _started_under(os.getpid(), before) and time.monotonic() < deadline:
        time.sleep(0.05)
    left: dict[int, str] = {}
    while True:  # stopped first, so that none forks a child the scan missed, then killed
        found = {pid: cmd for pid, cmd in _started_under(os.getpid(), before).items() if pid not in left}
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
        left.update(found)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        failed_already = getattr(request.node, "_cagtool_call_failed", False)
        message = f"killed {len(left)} process(es) the test left running: " + "; ".join(cmd[:160] for cmd in left.values())
        if failed_already:  # the test's own failure is the news; the processes are gone now
            warnings.warn(message, stacklevel=1)
        else:
            pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> Path:
    """One Inductor cache dir for the whole session, xdist workers included (cold compiles cost
    ~10 s each)."""
    path = _session_dir(tmp_path_factory, "inductor-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path


# Requests served by a larger recording of the same script, arguments and backend: (modes, extra)
# of the recording that serves them. Each mode of `cagtool run` is its own fresh process, so the ca
# mode of a three-mode run is the same recording as a ca-only run (the tests that ask for ca alone
# read only the ca mode). `--trace-nodes --depyf` add node tracebacks and depyf's dump to the
# record and `--gate` adds gate.json and the exit code: the op_loop tests that ask for either read
# what theirs adds, and the depyf tests read the gate's exit code as the run's (see their `_gated_ca`).
_GATED_OP_LOOP = ("--gate", "--max-ca-graphs", "1", "--no-config", "--trace-nodes", "--depyf")
_SERVED_BY: dict[tuple, tuple[str, tuple[str, ...]]] = {
    ("graph_breaks.py", ("3",), "ca", "eager", ()): ("eager,aot,ca", ()),
    ("op_loop.py", (), "ca", "eager", ("--trace-nodes", "--depyf")): ("ca", _GATED_OP_LOOP),
    ("op_loop.py", (), "ca", "eager", ("--gate", "--max-ca-graphs", "1", "--no-config")): ("ca", _GATED_OP_LOOP),
    # report/test_failure_where.py reads its ca mode's failure, and the headline whose failure it is
    (str(ROOT / "tests" / "scripts" / "sparse_backward.py"), (), "ca", "aot_eager", ()): ("eager,aot,ca", ()),
}


@pytest.fixture(scope="session")
def record_run(tmp_path_factory, inductor_cache):
    """record_run("op_loop.py", modes="ca", backend="eager") -> RecordedRun, recorded once per
    session (once for all xdist workers: the first to ask records it, the others read its result).

    Runs `cagtool run --modes MODES --backend BACKEND -o DIR [extra...] SCRIPT [args...]` in a
    subprocess, like a user would."""
    cache: dict[tuple, RecordedRun] = {}
    shared = _session_dir(tmp_path_factory, "recordings")

    def _run(script: str, *args: str, modes: str = "ca", backend: str = "eager", extra: tuple[str, ...] = ()) -> RecordedRun:
        modes, extra = _SERVED_BY.get((script, args, modes, backend, extra), (modes, extra))
        key = (script, args, modes, backend, extra)
        if key not in cache:
            slot = shared / f"{Path(script).stem}-{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"
            result = slot / "result.json"
            with _exclusive(shared / f"{slot.name}.lock"):
                if not result.is_file():
                    out = slot / Path(script).stem
                    shutil.rmtree(slot, ignore_errors=True)  # what a worker killed mid-recording left
                    slot.mkdir()
                    env = {**os.environ, "CI": "true", "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
                    cmd = cagtool_cmd("run", "--modes", modes, "--backend", backend, "-o", str(out), *extra, str(SAMPLES / script), *args)
                    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(ROOT))
                    recorded = RecordedRun(out, proc.returncode, proc.stdout, proc.stderr)
                    result.write_text(json.dumps({**asdict(recorded), "path": str(out)}))
                data = json.loads(result.read_text())
            cache[key] = RecordedRun(Path(data["path"]), data["returncode"], data["stdout"], data["stderr"])
        return cache[key]

    return _run


class FakeClock:
    """A clock that moves only when the test says so (pyinstrument's tests do the same): code that
    acts after a time window is tested by moving the clock past it, not by sleeping on a machine
    whose load decides how long a sleep is."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session")
def checkpoint_pieces_run(record_run) -> Path:
    """`cagtool run --modes ca --backend eager --dynamic tests/scripts/checkpoint_pieces.py`: a
    non-reentrant checkpoint's unpack hooks split the compiled-autograd graph's code into pieces,
    each recompiled for one change of batch size (the explanation's and the graph count's record)."""
    run = record_run(str(ROOT / "tests" / "scripts" / "checkpoint_pieces.py"), extra=("--dynamic",))
    assert run.returncode == 0, run.stderr[-2000:]
    return run.path


@pytest.fixture(scope="session")
def graph_breaks(record_run) -> Path:
    """`cagtool run --modes aot,ca --backend eager sample_scripts/graph_breaks.py 60`: 2 graph breaks,
    ~58 steady steps (the gate tests' real record)."""
    run = record_run("graph_breaks.py", "60", modes="aot,ca")
    assert run.returncode == 0, run.stderr
    return run.path


def private_copy(recording: Path, dest: Path) -> Path:
    """A copy of a session's shared recording for a test that writes into its run (`cagtool gate`
    keeps gate.json there): a shared recording is read by other workers as it is written, and a
    copy taken while a gate replaces its file would meet the gate's temporary file vanishing.
    Temporary files of an atomic write (`.NAME.PID.RAND.tmp`) are not copied."""
    return Path(shutil.copytree(recording, dest, symlinks=True, ignore=shutil.ignore_patterns(".*.tmp")))


@pytest.fixture
def work(tmp_path) -> Path:
    """A working directory with no pyproject.toml above it that has a gate table."""
    path = tmp_path / "work"
    path.mkdir()
    return path


def cli_in_process(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, unset: tuple[str, ...] = ()):
    """Run cli.main in-process, with `env` set and the variables in `unset` removed for the call;
    returns (exit code, stdout, stderr)."""
    import contextlib
    import io

    from cagtool.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_env = dict(os.environ)
    old_cwd = os.getcwd()
    os.environ.update(env or {})
    for name in unset:
        os.environ.pop(name, None)
    if "COLUMNS" not in (env or {}):
        os.environ.pop("COLUMNS", None)  # off a terminal with no COLUMNS: what a CI log gets
    if "GITHUB_ACTIONS" not in (env or {}):
        os.environ.pop("GITHUB_ACTIONS", None)
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
    code = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
        sys.stdout.flush()
    return code, out.getvalue(), err.getvalue()


def cagtool_in_process(*args, cwd: Path = ROOT, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`cagtool ARGS` through the CLI's own entry point in this process, returned as a finished
    subprocess would be. For the commands that read records and write reports (summary, compare,
    gate, baseline, recompiles, diff-graphs, report, export, merge, import): a new interpreter per
    call costs ~0.6 s of CPU starting Python and importing cagtool, in-process a few ms once the
    first call has imported it. `cagtool run` stays a real process (it is the job's parent: its
    signals and exit are what is tested), and so do the tests of the console entry point itself
    (test_console_exit.py) and of what a report command writes to a real pipe."""
    code, out, err = cli_in_process(*map(str, args), env=env, cwd=cwd, unset=unset)
    return subprocess.CompletedProcess(["cagtool", *map(str, args)], code, out, err)


@pytest.fixture(autouse=True)
def reset_torch_state():
    """Tests that drive torch in-process start from a clean Dynamo / compiled-autograd state."""
    yield
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()


def can_mount_tmpfs(where: Path) -> bool:
    """Mount a 200 KiB tmpfs at `where` (created) when the tests run as root with `mount`: a real
    full disk for the tests that need one (they unmount it); False where that cannot be done."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def ddp_unsynced_ragged(record_run) -> RecordedRun:
    """`cagtool run --modes eager,ca --backend eager tests/scripts/ddp_unsynced_ragged.py`: a 2-rank
    DDP job (mp.spawn, gloo) with a parameter left out of the all-reduce and a ragged last batch,
    recorded once per session for the DDP gradient-parity test and the DDP `recompiles --verify`
    test, which each ran a 2-rank job of their own before."""
    return record_run(str(ROOT / "tests" / "scripts" / "ddp_unsynced_ragged.py"), modes="eager,ca")


def ddp_ranks_diverge_gated(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """`cagtool run --modes ca --backend eager --gate --rank 0 --max-recompiles ca:0 --no-config
    tests/scripts/ddp_rank_diverges.py --steps 4`: a 2-rank gloo DDP job (mp.spawn) whose rank 1
    runs one extra op at step 2, gated on rank 0 as it is recorded (the gate fails on the ranks
    parting: exit 1, the job's own exit 0). One job for the ranks report's tests and the gate's
    `--rank` tests, each module-scoped fixture with its own copy (recorded_once): a test there
    replaces the run's gate.json. Returns (the run, its `cagtool run` process)."""

    def record(base: Path) -> list:
        env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")}
        cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(base / "run"), "--gate", "--rank", "0",
                          "--max-recompiles", "ca:0", "--no-config", str(ROOT / "tests" / "scripts" / "ddp_rank_diverges.py"), "--steps", "4")
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**env, "CI": "true", "COLUMNS": "100"}, timeout=600)
        return [proc.args, proc.returncode, proc.stdout, proc.stderr]

    base, proc = recorded_once(tmp_path_factory, "ddp-ranks-diverge-gated-rank0", record)
    return base / "run", subprocess.CompletedProcess(*proc)
