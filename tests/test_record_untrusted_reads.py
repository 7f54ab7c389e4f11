"""A run directory handed over by someone else (a CI artifact of an untrusted pull request): every
file a report command reads from it is read as the regular file it must be. A link planted as a
record file (events, run.json, a manifest, a process record, a graph's code, a compile artifact) is
refused, not followed, and so is a path field leading out of the run; a FIFO never hangs a reader;
each is one line and exit 3, and nothing of the file outside reaches the output. A real `cagtool
run` record of a real torch job (op_loop.py, ca mode), copied and tampered with per case."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cli_in_process as cagtool
from conftest import private_copy

pytestmark = pytest.mark.slow

SECRET = "the-victims-secret-line"


@pytest.fixture
def run(record_run, tmp_path) -> Path:
    recorded = record_run("op_loop.py", modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    copy = private_copy(recorded.path, tmp_path / "run")
    (tmp_path / "victim.txt").write_text(SECRET + "\n")
    return copy


def _refused(args: tuple[str, ...], said: str) -> None:
    code, out, err = cagtool(*args)
    assert code == 3 and said in err and err.count("\n") == 1 and "Traceback" not in err, (args, code, err)
    assert SECRET not in out + err


def _link(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


@pytest.mark.parametrize("name", ["run.json", "ca/manifest.json", "ca/events.jsonl", "ca/cpu_wait.json"])
def test_a_record_file_planted_as_a_link_is_refused(run, tmp_path, name):
    if not (run / name).exists():
        pytest.skip(f"{name}: not written here (no per-process scheduler statistics to read the load from)")
    _link(run / name, tmp_path / "victim.txt")
    for command in ("summary", "report", "compare"):
        _refused((command, str(run)), "is a symbolic link; a record's files are read only as regular files, never through a link")


def test_a_process_record_planted_as_a_link_is_refused(run, tmp_path):
    outside = Path(shutil.copytree(run / "ca", tmp_path / "outside-rank"))
    (run / "ca" / "procs").mkdir(exist_ok=True)
    (run / "ca" / "procs" / "rank1").symlink_to(outside)
    for command in ("summary", "gate"):
        _refused((command, str(run), *(("--max-recompiles", "ca:99", "--no-config") if command == "gate" else ())), "is a symbolic link; refusing to read it")


def test_a_folder_of_the_record_planted_as_a_link_is_never_read_through(run, tmp_path):
    """A link's last name is refused by O_NOFOLLOW; a folder on the way is not, so a record's folder
    planted as a link (`ca/graphs` or `ca/procs` -> a copy elsewhere, edited) is refused by name
    below the run: the graph readers (report, diff-graphs) exit 3; summary, which reads a graph only
    for the earlier values of changed sizes, says what it says without the graph files (as for a
    record without them), never what the copy says; a `procs` folder link is refused (exit 3)."""
    graphs = run / "ca" / "graphs"
    outside = Path(shutil.copytree(graphs, tmp_path / "outside-graphs"))
    shutil.rmtree(graphs)
    without = cagtool("summary", str(run))
    assert without[0] == 0
    for path in outside.glob("*.json"):  # a read through the link would show these
        data = json.loads(path.read_text())
        for node in data.get("nodes", []):
            node["target"] = SECRET
        path.write_text(json.dumps(data))
    graphs.symlink_to(outside)
    assert cagtool("summary", str(run)) == without
    for args in (("report", str(run)), ("diff-graphs", str(run), "0", "1")):
        _refused(args, f"{graphs} is a symbolic link; a record's files are read only as regular files, never through a link")
    graphs.unlink()
    procs = tmp_path / "outside-procs"
    shutil.copytree(run / "ca", procs / "rank1", ignore=shutil.ignore_patterns("procs"))
    (run / "ca" / "procs").symlink_to(procs)
    for command in ("summary", "report"):
        _refused((command, str(run)), f"{run / 'ca' / 'procs'} is a symbolic link; a record's files are read only as regular files")


def test_a_run_planted_as_a_link_under_the_runs_folder_is_not_a_run(run, tmp_path, monkeypatch):
    """`./.cagtool/runs/<link>` in an untrusted checkout: not listed by `runs`, never the latest run
    that `summary` and `report` read with no RUN (report would write its page into the link's
    target)."""
    work = tmp_path / "work"
    (work / ".cagtool" / "runs").mkdir(parents=True)
    monkeypatch.chdir(work)
    meta = json.loads((run / "run.json").read_text())
    meta["created_at"] = "2999-01-01T00:00:00+00:00"  # the newest, were it read
    (run / "run.json").write_text(json.dumps(meta))
    (work / ".cagtool" / "runs" / "planted").symlink_to(run)
    code, out, err = cagtool("runs")
    assert "planted" not in out + err
    page = run / "report.html"
    before = page.stat().st_mtime_ns if page.exists() else None
    code, out, err = cagtool("report")
    assert code == 3 and "no runs recorded yet" in err, (code, err)
    assert (page.stat().st_mtime_ns if page.exists() else None) == before


def test_gate_junit_never_writes_through_a_link_planted_at_its_name(run, tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "junit.xml").symlink_to(victim)
    code, _, err = cagtool("gate", str(run), "--max-recompiles", "ca:99", "--no-config", "--junit", "junit.xml")
    assert code == 0, err
    assert victim.read_text() == SECRET + "\n"
    assert not (tmp_path / "junit.xml").is_symlink() and "<testsuite" in (tmp_path / "junit.xml").read_text()


def test_a_folder_swapped_for_a_link_after_its_names_were_checked_is_not_read_through(run, tmp_path):
    """The race a name check cannot close: `ca/graphs` checked (no link on the way, loader.inside),
    then swapped for a link to a folder elsewhere before the file is opened (a loop of renames while
    `cagtool report` reads). O_NOFOLLOW sees only the last name, so the open itself must find the
    file under the run's real path; the swap done here between the check and the read, in one process."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.loader import inside, load_run
    from cagtool.record.regular_files import read_record_bytes
    from cagtool.record.schema import CAGraphEvent

    record = load_run(run)
    graph = next(g for g in record.modes["ca"].of(CAGraphEvent) if g.code_file)
    path = inside(record.modes["ca"].path, graph.code_file, "code file")  # checked: no link yet
    assert read_record_bytes(path)
    graphs = run / "ca" / "graphs"
    outside = Path(shutil.copytree(graphs, tmp_path / "outside-graphs"))
    (outside / path.name).write_text(SECRET + "\n")
    graphs.rename(run / "ca" / "graphs.real")
    graphs.symlink_to(outside)
    with pytest.raises(UnreadableInput, match="outside the run: a folder of the record was swapped for a link"):
        read_record_bytes(path)
    graphs.unlink()
    (run / "ca" / "graphs.real").rename(graphs)
    assert SECRET.encode() not in read_record_bytes(path)


def test_a_graphs_code_read_by_the_report_never_leaves_the_run(run, tmp_path):
    """The report embeds each CA graph's code: a code file planted as a link, or a code_file
    field leading out of the run (relative or absolute), is refused, not embedded."""
    graphs = sorted((run / "ca" / "graphs").glob("*.py"))
    assert graphs
    original = graphs[0].read_bytes()
    _link(graphs[0], tmp_path / "victim.txt")
    _refused(("report", str(run)), "is a symbolic link; a record's files are read only as regular files, never through a link")
    graphs[0].unlink()
    graphs[0].write_bytes(original)
    events = run / "ca" / "events.jsonl"
    (run / "ca" / "columns.json").unlink(missing_ok=True)
    lines = events.read_text().splitlines()
    for forged in ("../../victim.txt", str(tmp_path / "victim.txt")):
        changed = []
        for line in lines:
            event = json.loads(line)
            if event.get("kind") == "ca_graph" and event.get("code_file"):
                event["code_file"] = forged
            changed.append(json.dumps(event))
        events.write_text("\n".join(changed) + "\n")
        _refused(("report", str(run)), "points outside the record; refusing to read it")
    assert SECRET not in (run / "report.html").read_text()  # the recorded run's own report, untouched


def _forge_events(run: Path, kind: str, field: str, value: str, only: dict | None = None) -> None:
    """Every `kind` event of the ca mode (those also matching `only`) given `field` = `value`, the
    columns sidecar removed so the lines are what is read."""
    events = run / "ca" / "events.jsonl"
    (run / "ca" / "columns.json").unlink(missing_ok=True)
    changed = []
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == kind and all(event.get(k) == v for k, v in (only or {}).items()):
            event[field] = value
        changed.append(json.dumps(event))
    events.write_text("\n".join(changed) + "\n")


def test_a_path_field_with_a_nul_byte_is_refused(run):
    """A NUL byte in a path a record names (a graph's code_file, a compile artifact's file), which
    os.open refuses with a ValueError: the report and `cagtool compile` refuse it, exit 3 with one
    line naming the field and the name, never an internal error (exit 4)."""
    from cagtool.record.loader import load_run
    from cagtool.record.schema import CompileArtifactEvent

    fresh = Path(shutil.copytree(run, run.parent / "fresh", symlinks=True))
    artifact = load_run(run).mode("ca").of(CompileArtifactEvent)[0]
    forged = artifact.file + "\0.txt"
    _forge_events(run, "compile_artifact", "file", forged, {"compile_id": artifact.compile_id, "artifact": artifact.artifact})
    said = f"{forged!r} holds a NUL byte, which no file name can (a damaged or forged record); refusing to read it"
    _refused(("compile", str(run), artifact.compile_id, "--show", "all"), f"compile artifact {artifact.artifact} of {artifact.compile_id}: {said}")
    _refused(("report", str(run), "-o", str(run / "forged.html")), said)
    _forge_events(fresh, "ca_graph", "code_file", "graphs/ca_\x000.py")
    _refused(("report", str(fresh), "-o", str(fresh / "forged.html")), "'graphs/ca_\\x000.py' holds a NUL byte, which no file name can")


def test_a_name_with_a_nul_byte_is_refused_where_every_record_file_is_opened(tmp_path):
    """The one opener of a record's files refuses a name with a NUL byte in one line (UnreadableInput),
    whichever reader the name came through, as it refuses a link or a FIFO."""
    from cagtool.errors import UnreadableInput
    from cagtool.record.regular_files import read_record_bytes

    (tmp_path / "a").write_text("{}")
    with pytest.raises(UnreadableInput, match="holds a NUL byte, which no file name can"):
        read_record_bytes(tmp_path / "a\0b", max_bytes=10)


@pytest.mark.parametrize("name", ["run.json", "ca/manifest.json", "ca/events.jsonl", "ca/cpu_wait.json"])
def test_a_fifo_planted_as_a_record_file_never_hangs_a_reader(run, name):
    path = run / name
    path.unlink()
    os.mkfifo(path)
    for command in ("summary", "report"):
        _refused((command, str(run)), "is not a regular file (a FIFO, device or directory); refusing to read it")


def test_a_fifo_planted_as_a_graphs_code_never_hangs_the_report(run):
    graph = sorted((run / "ca" / "graphs").glob("*.py"))[0]
    graph.unlink()
    os.mkfifo(graph)
    _refused(("report", str(run)), "is not a regular file (a FIFO, device or directory); refusing to read it")

def _nested(depth: int = 100_000) -> str:
    """A JSON value nested deeper than json's and msgspec's decoders go (RecursionError in both)."""
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("name", ["ca/cpu_wait.json", "checkpointing.json"])
def test_an_optional_json_file_nested_too_deeply_is_no_reading(run, tmp_path, name):
    """cpu_wait.json (the CPU-wait readings) and checkpointing.json (`cagtool checkpointing`'s kept
    measurement) are optional: one that is not JSON is no reading, never a refused record. One
    nested deeper than the decoders go is read as such a file (it was exit 4, a RecursionError):
    every command that reads it gives what it gives for a file that is not JSON at all."""
    path = run / name
    path.write_text('{"format": "x", "x": ' + _nested() + "}")
    r = str(run)
    commands = [("summary", r), ("summary", r, "--format", "json"), ("gate", r, "--max-recompiles", "ca:99", "--no-config"),
                ("compare", r), ("export", r, "--perfetto", str(tmp_path / "trace.json")), ("report", r, "-o", str(tmp_path / "report.html")),
                ("baseline", "save", r, "-o", str(tmp_path / "baseline.json"))]
    nested = [cagtool(*command) for command in commands]
    for command, (code, out, err) in zip(commands, nested):
        assert code == 0 and "Traceback" not in err and "internal error" not in err, (command, code, err[-2000:])
    path.write_text("{not json")
    assert cagtool("summary", str(run), "--format", "json")[1] == nested[1][1]


def _forge_last_step(run: Path, field: str, value: str) -> None:
    """The last timed step line's `field` set to `value` (json's spelling), read from the lines."""
    events = run / "ca" / "events.jsonl"
    (run / "ca" / "columns.json").unlink(missing_ok=True)
    lines = events.read_text().splitlines()
    steps = [i for i, line in enumerate(lines) if json.loads(line).get("kind") == "step" and json.loads(line).get("wall_s") is not None]
    assert steps
    event = json.loads(lines[steps[-1]])
    event[field] = 0.0
    lines[steps[-1]] = json.dumps(event).replace(f'"{field}": 0.0', f'"{field}": {value}')
    events.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("field, value", [("t", "NaN"), ("t", "Infinity")])
def test_an_event_time_that_is_no_time_is_left_out_of_every_figure(run, tmp_path, field, value):
    """A step line whose `t` (when it was written) is NaN or infinite (json's spellings, which the
    record reads): summary, compare, report and the Perfetto export end with exit 0 and no figure
    of it (no `nan` or absurd time, no numpy warning), as for a step whose time is unknown."""
    _forge_last_step(run, field, value)
    for args in (("summary", str(run)), ("compare", str(run)), ("report", str(run), "-o", str(tmp_path / "r.html")),
                 ("export", str(run), "--perfetto", str(tmp_path / "trace.json"))):
        code, out, err = cagtool(*args)
        assert code == 0 and "Warning" not in err and "Traceback" not in err, (args, err[-2000:])
        said = out + err
        assert " nan ms" not in said and "e+30" not in said and "inf ms" not in said, (args, said[-2000:])
    json.loads((tmp_path / "trace.json").read_text())  # valid JSON: no NaN in it


@pytest.mark.parametrize("value", ["-Infinity", "1e308", "NaN"])
def test_a_step_time_that_is_no_time_refuses_the_record(run, tmp_path, value):
    """A step line whose time is NaN, infinite or beyond any step's (record/bounds.py): every
    report refuses the record (exit 3, one line naming events.jsonl, the field and the value), as a
    baseline holding it is refused (tests/test_record_bounds.py has every figure and both paths)."""
    _forge_last_step(run, "wall_s", value)
    for args in (("summary", str(run)), ("compare", str(run)), ("report", str(run), "-o", str(tmp_path / "r.html")),
                 ("export", str(run), "--perfetto", str(tmp_path / "trace.json"))):
        _refused(args, f"{run / 'ca' / 'events.jsonl'}: line ")
        assert not (tmp_path / "trace.json").exists()


def test_a_compile_guards_file_read_by_recompiles_never_leaves_the_run(record_run, tmp_path):
    """`recompiles --explain` reads the guards of each compile of torch's shared module wrapper (which
    module it was for): one planted as a link is refused, not read."""
    recorded = record_run("../tests/scripts/nested_compiled_modules.py", modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    run = Path(shutil.copytree(recorded.path, tmp_path / "run", symlinks=True))
    (tmp_path / "victim.txt").write_text(SECRET + "\n")
    assert cagtool("recompiles", str(run), "--explain")[0] == 0
    _link(run / "ca" / "compiles" / "0_1" / "dynamo_cpp_guards_str.txt", tmp_path / "victim.txt")
    _refused(("recompiles", str(run), "--explain"), "is a symbolic link; a record's files are read only as regular files, never through a link")


_PEAK_CHILD = textwrap.dedent("""\
    import resource, sys
    from cagtool.cli import main
    import cagtool.record.columns, cagtool.record.loader  # what the command reads with, imported before the limit

    def address_space():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))

    resource.setrlimit(resource.RLIMIT_AS, (address_space() + int(sys.argv[1]), resource.RLIM_INFINITY))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        main(sys.argv[2:])
        code = 0
    except SystemExit as exc:
        code = exc.code
    print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
    sys.exit(code)
    """)


def _refused_from_its_size(proc, path, size: int, kind: str, bound: int) -> None:
    """One line, exit 3, no traceback, naming the file and its size; read no further than the bound
    (the process's last stdout line: its peak RSS growth in bytes)."""
    errors = proc.stderr.splitlines()
    assert proc.returncode == 3 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-2000:]
    assert errors[0] == (f"cagtool: error: {path} is {size:,} bytes, more than any {kind} cagtool writes "
                         f"({bound:,} at most: a damaged or forged file); refusing to read it"), errors
    assert int(proc.stdout.splitlines()[-1]) < bound


def _under_address_limit(*args: str) -> subprocess.CompletedProcess:
    """`cagtool ARGS` in a process allowed 1 GiB of address space more than it had before the
    command: a 2 GiB file read whole does not fit. Its last line of stdout is how much its peak RSS grew."""
    return subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(2**30), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def _sparse_json(path: Path, size: int) -> None:
    """`path` replaced by a JSON object of `size` bytes whose string value is a hole of NULs: nothing of it on disk."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as handle:
        handle.write(b'{"format": "x", "note": "')
        handle.seek(size - 3)
        handle.write(b'"}\n')
    assert os.stat(path).st_blocks * 512 < 2**20


@pytest.mark.parametrize("name, command", [("run.json", "summary"), ("ca/manifest.json", "summary"), ("ca/graphs/ca_0.json", "diff-graphs"),
                                           ("baseline.json", "baseline show"), ("baseline.json", "gate")])
def test_a_json_file_larger_than_any_cagtool_writes_is_refused_without_reading_it(run, tmp_path, name, command):
    """run.json, a manifest, a graph's nodes file or a baseline replaced by a 2 GiB JSON document
    (a forged or damaged record): refused from its size (MAX_JSON_FILE_BYTES, 64 MiB), exit 3 with one
    line naming the file, under an address-space limit of 1 GiB more than the process had; its peak
    RSS grows by less than 64 MiB. Read whole, it raised MemoryError (exit 4, an internal error)."""
    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    size = 2 * 2**30
    path = tmp_path / name if name == "baseline.json" else run / name
    if name == "baseline.json":
        assert cagtool("baseline", "save", str(run), "-o", str(path))[0] == 0
    _sparse_json(path, size)
    args = {"summary": ("summary", str(run)), "diff-graphs": ("diff-graphs", str(run), "0", "1"),
            "baseline show": ("baseline", "show", str(path)),
            "gate": ("gate", str(run), "--baseline", str(path), "--max-recompiles", "ca:99", "--no-config")}[command]
    _refused_from_its_size(_under_address_limit(*args), path, size, "JSON file", MAX_JSON_FILE_BYTES)


def test_a_graph_file_or_baseline_planted_as_a_link_is_refused(run, tmp_path):
    """A graph's nodes file linked to a copy outside the run, or to another graph inside it, and a
    baseline that is a link: each refused (exit 3, one line), never followed."""
    graph = run / "ca" / "graphs" / "ca_0.json"
    shutil.copy(graph, tmp_path / "outside.json")
    _link(graph, tmp_path / "outside.json")
    _refused(("diff-graphs", str(run), "0", "1"), "is a symbolic link; a record's files are read only as regular files, never through a link")
    graph.unlink()
    graph.symlink_to("ca_1.json")  # stays inside the run: the link itself is refused
    _refused(("diff-graphs", str(run), "0", "1"), "is a symbolic link; a record's files are read only as regular files, never through a link")
    baseline = tmp_path / "baseline.json"
    assert cagtool("baseline", "save", str(run), "-o", str(tmp_path / "saved.json"))[0] == 0
    baseline.symlink_to(tmp_path / "saved.json")
    for args in (("baseline", "show", str(baseline)), ("gate", str(run), "--baseline", str(baseline), "--max-recompiles", "ca:99", "--no-config")):
        _refused(args, "is a symbolic link; a record's files are read only as regular files, never through a link")


def test_a_columns_sidecar_planted_as_a_link_is_not_followed(run, tmp_path):
    """The sidecar is only a faster reading of events.jsonl: one planted as a link (here to an exact,
    valid copy of the run's own) is never read through; the loader reads the lines instead, and
    `summary` says the same."""
    from cagtool.record.columns import COLUMNS_FILE, read_sidecar

    mode = run / "ca"
    events = mode / "events.jsonl"
    sidecar = mode / COLUMNS_FILE
    assert read_sidecar(mode, events.read_bytes()) is not None  # the real one, in place, is used
    expected = cagtool("summary", str(run))
    assert expected[0] == 0
    shutil.copy2(sidecar, tmp_path / "columns.json")
    _link(sidecar, tmp_path / "columns.json")
    assert read_sidecar(mode, events.read_bytes()) is None
    assert read_sidecar(mode, events_stat=events.stat()) is None
    assert cagtool("summary", str(run)) == expected

def _forged_sidecar(mode: Path, header_extra: str = "", column: bytes | None = None) -> None:
    """The mode's columns sidecar, forged with every checksum kept true: `header_extra` added to its
    header's JSON object, or the step column `ca_captures` pointed at `column`, appended to its body."""
    import zlib

    from cagtool.record.columns import COLUMNS_FILE

    path = mode / COLUMNS_FILE
    header, body = path.read_bytes().split(b"\n", 1)
    doc = json.loads(header)
    if column is not None:
        doc["kinds"]["step"]["columns"]["ca_captures"] = ["values", len(body), len(column), zlib.crc32(column)]
        body += column
        doc["body_crc32"] = zlib.crc32(body)
    text = json.dumps(doc, separators=(",", ":"))
    path.write_bytes((text[:-1] + header_extra + "}").encode() + b"\n" + body)


def test_a_columns_sidecar_nested_too_deeply_is_read_as_no_sidecar_or_refused(run):
    """The sidecar's header nested deeper than json goes is a sidecar not to trust: the lines are
    read instead, the summary the same. A column in its body that decodes to nothing the writer
    writes (nested too deeply, or not JSON) under true checksums is a forged record: exit 3, one
    line naming the sidecar and the column (both were exit 4, a RecursionError or a JSONDecodeError)."""
    from cagtool.record.columns import COLUMNS_FILE

    mode = run / "ca"
    original = (mode / COLUMNS_FILE).read_bytes()
    expected = cagtool("summary", str(run))
    assert expected[0] == 0
    _forged_sidecar(mode, header_extra=',"x":' + _nested())
    assert cagtool("summary", str(run)) == expected
    for column, words in ((_nested().encode(), "nested too deeply"), (b"garbage", "Expecting value")):
        (mode / COLUMNS_FILE).write_bytes(original)
        _forged_sidecar(mode, column=column)
        for command in ("summary", "compare", "report"):
            _refused((command, str(run)), f"{mode / COLUMNS_FILE}: the step column 'ca_captures' does not decode as one ({words}")


def _sidecar_column(mode: Path, kind: str, name: str, column: bytes | None, encoding: str = "values") -> None:
    """The mode's sidecar with its `kind` column `name` replaced by `column` (None: left out), every
    checksum kept true: a sidecar forged consistently."""
    import zlib

    from cagtool.record.columns import COLUMNS_FILE

    path = mode / COLUMNS_FILE
    header, body = path.read_bytes().split(b"\n", 1)
    doc = json.loads(header)
    if column is None:
        del doc["kinds"][kind]["columns"][name]
    else:
        doc["kinds"][kind]["columns"][name] = [encoding, len(body), len(column), zlib.crc32(column)]
        body += column
    doc["body_crc32"] = zlib.crc32(body)
    path.write_bytes(json.dumps(doc, separators=(",", ":")).encode() + b"\n" + body)


def test_a_columns_sidecar_forged_with_values_of_another_type_is_refused(run):
    """A sidecar column of strings where the field holds floats or integers (a step's time, loss or
    number), its checksums true: exit 3, one line naming the sidecar and the column, as a line of
    that type is refused (it was exit 4: a ValueError or TypeError in the figures' arithmetic). A
    column a step always holds left out: no sidecar the writer writes, the lines read instead."""
    from cagtool.record.columns import COLUMNS_FILE

    mode = run / "ca"
    original = (mode / COLUMNS_FILE).read_bytes()
    expected = cagtool("summary", str(run))
    assert expected[0] == 0
    count = json.loads(original.split(b"\n", 1)[0])["kinds"]["step"]["count"]
    strings = json.dumps([f"x{i}" for i in range(count)]).encode()
    for name, column, encoding in (("t", strings, "values"), ("loss", strings, "values"), ("step", strings, "values"),
                                   ("wall_s", json.dumps([["1.5", count]]).encode(), "runs"), ("step", b"[0.5,[[1,%d]]]" % (count - 1), "deltas")):
        (mode / COLUMNS_FILE).write_bytes(original)
        _sidecar_column(mode, "step", name, column, encoding)
        for command in ("summary", "compare"):
            _refused((command, str(run)), f"{mode / COLUMNS_FILE}: the step column {name!r} holds a value of another type")
    (mode / COLUMNS_FILE).write_bytes(original)
    _sidecar_column(mode, "step", "t", None)
    assert cagtool("summary", str(run)) == expected


@pytest.mark.parametrize("sidecar", [False, True])
def test_an_events_line_longer_than_any_event_is_refused_without_reading_it_whole(run, sidecar):
    """ca/events.jsonl replaced by one line of 2 GiB (a finding whose message is a sparse hole of
    NULs, no newline till the end): the reader stops once the line is past
    MAX_EVENT_LINE_BYTES (64 MiB), exit 3 with one line naming the file and the line, under an
    address-space limit of 1 GiB more than the process had, its peak RSS grown by less than a
    quarter of the line's size. Read whole, it did not fit. With a columns sidecar forged to match
    the file's size and time and to say where that line lies, the sidecar is not used (it was:
    the line was read there, whole)."""
    import zlib

    from cagtool.record.columns import COLUMN_KINDS, COLUMNS_FILE, COLUMNS_FORMAT, COLUMNS_VERSION
    from cagtool.record.schema import MAX_EVENT_LINE_BYTES

    events = run / "ca" / "events.jsonl"
    size = 2 * 2**30
    with open(events, "wb") as handle:
        handle.write(b'{"kind": "finding", "seq": 1, "t": 0.0, "code": "x", "message": "')
        handle.seek(size - 3)
        handle.write(b'"}\n')
    assert os.stat(events).st_blocks * 512 < 2**20  # sparse: nothing of it is on disk, nor read from it
    (run / "ca" / COLUMNS_FILE).unlink(missing_ok=True)
    if sidecar:
        os.utime(events, ns=(10**18, 10**18))  # before the sidecar's own time, as the writer leaves them
        header = {"format": COLUMNS_FORMAT, "version": COLUMNS_VERSION, "events_bytes": size, "events_crc32": 0,
                  "body_crc32": zlib.crc32(b""), "kinds": {kind: {"count": 0, "columns": {}} for kind in COLUMN_KINDS},
                  "other": [[1, 0, size - 1]], "events_mtime_ns": 10**18}
        (run / "ca" / COLUMNS_FILE).write_text(json.dumps(header) + "\n")
    proc = _under_address_limit("summary", str(run))
    errors = proc.stderr.splitlines()
    assert proc.returncode == 3 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-2000:]
    assert errors[0] == (f"cagtool: error: {events}: line 1 is longer than {MAX_EVENT_LINE_BYTES:,} bytes, more than any event "
                         "cagtool writes (a damaged or forged record); refusing to read it")
    grown = int(proc.stdout.splitlines()[-1])
    assert grown < size // 4, grown


def _sparse_text(path: Path, size: int) -> None:
    """`path` replaced by a text file of `size` bytes, a line of code then a hole of NULs: nothing of it on disk."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"def forged():\n    pass\n")
        handle.truncate(size)
    assert os.stat(path).st_blocks * 512 < 2**20


def _first_artifact(run: Path) -> tuple[str, Path]:
    from cagtool.record.loader import load_run
    from cagtool.record.schema import CompileArtifactEvent

    event = load_run(run).mode("ca").of(CompileArtifactEvent)[0]
    return event.compile_id, run / "ca" / event.file


def test_a_compile_artifact_larger_than_any_cagtool_writes_is_refused_without_reading_it(run):
    """A compile artifact replaced by a sparse 2 GiB file: `cagtool compile`, which prints it whole,
    refuses it from its size (MAX_TEXT_FILE_BYTES, 64 MiB), exit 3 with one line naming it, under an
    address-space limit of 1 GiB more than the process had; its peak RSS grows by less than 64 MiB."""
    from cagtool.record.schema import MAX_TEXT_FILE_BYTES

    compile_id, path = _first_artifact(run)
    size = 2 * 2**30
    _sparse_text(path, size)
    _refused_from_its_size(_under_address_limit("compile", str(run), compile_id, "--show", "all"), path, size, "text file", MAX_TEXT_FILE_BYTES)


def test_the_report_reads_only_the_start_of_a_graphs_code_it_shows(run, tmp_path):
    """The report shows the first 60,000 characters of a graph's code: a code file replaced by a
    sparse 2 GiB file is read no further than that (exit 0, under an address-space limit of 1 GiB
    more than the process had, peak RSS up by less than 64 MiB), and the page says how much it left out."""
    from cagtool.record.schema import MAX_TEXT_FILE_BYTES

    graph = sorted((run / "ca" / "graphs").glob("*.py"))[0]
    _sparse_text(graph, 2 * 2**30)
    out = tmp_path / "report.html"
    proc = _under_address_limit("report", str(run), "-o", str(out))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert int(proc.stdout.splitlines()[-1]) < MAX_TEXT_FILE_BYTES
    page = out.read_text()
    assert f"first 60,000 characters of {2 * 2**30:,} bytes; the whole file: {graph}" in page
    assert "forged" in page


@pytest.mark.parametrize("plant", ["link inside the run", "fifo", "link to /dev/zero"])
def test_a_compile_artifact_planted_as_a_link_or_fifo_is_refused(run, plant):
    """A compile artifact planted as a link to another file of the run, as a FIFO, or as a link to
    /dev/zero: `cagtool compile` and the report refuse it (exit 3, one line), never following the
    link, never waiting on the FIFO."""
    compile_id, path = _first_artifact(run)
    path.unlink()
    if plant == "fifo":
        os.mkfifo(path)
        said = "is not a regular file (a FIFO, device or directory); refusing to read it"
    elif plant == "link to /dev/zero":
        path.symlink_to("/dev/zero")
        said = "is a symbolic link; a record's files are read only as regular files, never through a link"
    else:
        path.symlink_to(os.path.relpath(run / "ca" / "manifest.json", path.parent))
        said = "is a symbolic link; a record's files are read only as regular files, never through a link"
    for args in (("compile", str(run), compile_id, "--show", "all"), ("report", str(run))):
        _refused(args, said)


def test_a_signal_stacks_file_planted_as_a_link_or_fifo_is_not_read(tmp_path):
    """The stacks a stopped process left (signal_stacks/SIGTERM.txt), read when a record of a
    vanished process is closed by its reader: one planted as a link is not followed and a FIFO is
    not waited on; either reads as no stacks."""
    from cagtool.record.liveness import signal_stop_exception
    from cagtool.record.schema import SIGNAL_STACKS_DIR

    (tmp_path / "victim.txt").write_text(SECRET + "\n")
    stacks = tmp_path / "ca" / SIGNAL_STACKS_DIR
    stacks.mkdir(parents=True)
    (stacks / "SIGTERM.txt").symlink_to(tmp_path / "victim.txt")
    os.mkfifo(stacks / "SIGHUP.txt")
    for name in ("SIGTERM", "SIGHUP"):
        stopped = signal_stop_exception(name, tmp_path / "ca")
        assert stopped["traceback"] == "" and SECRET not in stopped["message"], stopped
    (stacks / "SIGINT.txt").write_text("Thread 1:\n  File \"train.py\", line 3, in main\n")
    assert "train.py" in signal_stop_exception("SIGINT", tmp_path / "ca")["traceback"]


def test_baseline_save_refuses_a_baseline_larger_than_gate_reads(run, tmp_path):
    """A run whose run.json holds an argv of 24 MiB of UTF-8 (6 million 4-byte characters, a
    forged or imported record: cagtool writes ASCII escapes) makes a baseline of 72 MiB, JSON's
    escapes being 12 bytes a character: `baseline save` refuses it, exit 3 with one line, and a
    baseline already at the path is left as it was."""
    from cagtool.record.schema import MAX_JSON_FILE_BYTES

    baseline = tmp_path / "baseline.json"
    assert cagtool("baseline", "save", str(run), "-o", str(baseline))[0] == 0
    before = baseline.read_bytes()
    meta = json.loads((run / "run.json").read_text())
    meta["target_argv"] = ["train.py", "\U0001F600" * 6_000_000]
    (run / "run.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    assert (run / "run.json").stat().st_size < MAX_JSON_FILE_BYTES
    code, out, err = cagtool("baseline", "save", str(run), "-o", str(baseline))
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err, err[-2000:]
    assert err.startswith("cagtool: error: not saving the baseline: it would be ") and f"more than the {MAX_JSON_FILE_BYTES:,} `cagtool gate` reads" in err
    assert "target_argv is " in err and f"{baseline} is left as it was" in err, err
    assert baseline.read_bytes() == before


@pytest.mark.parametrize("name", ["ca.2\x1b[31mRED", "ca 2", "ca/../ca", "", "-" * 65])
def test_a_mode_named_with_a_terminals_control_characters_or_a_path_is_refused(run, name):
    """A mode's name comes from run.json and is printed by every report: one with an escape
    sequence (which would recolour or rewrite the reader's terminal), a space, a separator or no
    letters is refused before any mode is read, one line, exit 3."""
    meta = json.loads((run / "run.json").read_text())
    meta["modes"] = ["ca", name]
    (run / "run.json").write_text(json.dumps(meta))
    for command in ("summary", "recompiles", "compare"):
        code, out, err = cagtool(command, str(run))
        assert code == 3 and "lists a mode named" in err and err.count("\n") == 1 and "\x1b" not in out + err, (command, code, err)


def test_compile_calls_forged_to_other_types_are_left_out_not_a_crash(record_run, tmp_path):
    """The manifest's `compile_calls` are matched to recompiled frames by their fields: an entry
    whose line was a list crashed `summary` and `recompiles --explain` (internal error, exit 4:
    unhashable type). Entries whose fields are not their types are left out; the rest are read."""
    # its size recompile is of the frame the script's torch.compile compiled first (test_verify_fixes.py shares it)
    recorded = record_run(str(Path(__file__).parent / "scripts" / "set_on_first_call.py"), modes="ca", backend="eager")
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    copy = private_copy(recorded.path, tmp_path / "run")
    manifest_path = copy / "ca" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    calls = manifest["options"]["compile_calls"]
    assert calls and all(isinstance(c["line"], int) for c in calls)
    good = dict(calls[0])
    manifest["options"]["compile_calls"] = [{**good, "line": [good["line"]]}]
    manifest_path.write_text(json.dumps(manifest))
    for args in (("summary", str(copy)), ("recompiles", "--explain", str(copy))):
        code, out, err = cagtool(*args)
        assert code == 0 and "internal error" not in err, (args, code, err)
    manifest["options"]["compile_calls"] = [{**good, "file": 5}, {**good, "code": "x"}, {**good, "backend": {"eager": 1}}]
    manifest_path.write_text(json.dumps(manifest))
    for args in (("summary", str(copy)), ("recompiles", "--explain", str(copy))):
        code, out, err = cagtool(*args)
        assert code == 0 and "internal error" not in err, (args, code, err)
    from cagtool.record.loader import load_run
    from cagtool.record.manifest import typed_compile_calls

    assert typed_compile_calls(load_run(copy).modes["ca"].manifest) == ()
    manifest["options"]["compile_calls"] = [good, {**good, "line": True}]
    manifest_path.write_text(json.dumps(manifest))
    assert typed_compile_calls(load_run(copy).modes["ca"].manifest) == (good,)
