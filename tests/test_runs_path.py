"""What `cagtool runs` reads with, kept cheap without changing what it reads: record JSON decoded
by msgspec reads as json would, `inside` refuses a symbolic link out of the record without
resolving every path, and the listing loads neither json nor the graph file's module."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cagtool.errors import UnreadableInput
from cagtool.record.loader import inside, json_loads, read_json_object

DOCUMENTS = ['{"a": 1, "a": 2}', "123456789012345678901234567890", "1e400", "NaN", '{"d": -Infinity}', '"\\ud800"', "-0.0", '{"x": [1.5e-320, 0.1]}']


@pytest.mark.parametrize("text", DOCUMENTS)
def test_json_loads_reads_what_json_reads(text):
    expected = json.loads(text)
    assert repr(json_loads(text)) == repr(expected) and repr(json_loads(text.encode())) == repr(expected)


@pytest.mark.parametrize("text", ["{bad", "[1, 2] x", "\ufeff{}", ""])
def test_bad_json_is_worded_by_json(tmp_path, text):
    path = tmp_path / "run.json"
    path.write_text(text, encoding="utf-8")
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        expected = f"run record {path} is not valid JSON ({exc.msg} at line {exc.lineno})"
    with pytest.raises(UnreadableInput) as raised:
        read_json_object(path, "run record")
    assert str(raised.value) == expected


def test_inside_refuses_a_path_out_of_the_record_and_any_link_below_it(tmp_path):
    """cagtool writes no link in a record: one below the run, whether it leads out or stays
    within, was planted, and is refused by name; the run's own path may be the user's link."""
    (tmp_path / "real" / "ca" / "graphs").mkdir(parents=True)
    root = tmp_path / "run"
    root.symlink_to(tmp_path / "real")  # the run the user named through their own link
    (tmp_path / "elsewhere").mkdir()
    (root / "out").symlink_to(tmp_path / "elsewhere")
    (root / "ca" / "up").symlink_to(tmp_path)
    (root / "alias").symlink_to(root / "ca")
    assert inside(root, "ca", "mode") == root / "ca"
    assert inside(root, "ca/graphs/ca_0.py", "graph") == root / "ca" / "graphs" / "ca_0.py"
    assert inside(root, "missing/x", "graph") == root / "missing" / "x"
    for name in ("../run/ca", "/etc"):
        with pytest.raises(UnreadableInput, match="points outside the record"):
            inside(root, name, "mode")
    for name, link in (("out", "out"), ("out/x", "out"), ("ca/up/elsewhere", "ca/up"), ("alias/graphs", "alias")):
        with pytest.raises(UnreadableInput, match="is a symbolic link") as raised:
            inside(root, name, "mode")
        assert f"{root / link} is a symbolic link" in str(raised.value)


def test_runs_loads_neither_json_nor_the_graph_file_module(tmp_path):
    from cagtool.record.manifest import ModeManifest, RunMeta, to_dict

    run = tmp_path / "runs" / "r"
    (run / "ca").mkdir(parents=True)
    meta = RunMeta(run_id="r", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd=str(run), modes=["ca"], versions={}, machine={}, status="finished", exit_code=0)
    manifest = ModeManifest(mode="ca", argv=[], target={}, cwd=str(run), versions={}, backend="eager", dynamic=False, started_at="2026-01-01T00:00:00Z", status="finished")
    (run / "run.json").write_text(json.dumps(to_dict(meta)))
    (run / "ca" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    probe = (
        "import sys\n"
        "from cagtool.cli import main\n"
        f"try:\n    main(['runs', {str(tmp_path / 'runs')!r}])\nexcept SystemExit:\n    pass\n"
        "sys.__stderr__.write(' '.join(sorted(sys.modules)))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and "train.py" in proc.stdout, proc.stderr
    loaded = set(proc.stderr.split())
    assert "cagtool.record.loader" in loaded
    assert not loaded & {"json", "cagtool.record.graph_file", "cagtool.record.columns"}, sorted(loaded & {"json", "cagtool.record.graph_file"})


def test_a_run_whose_run_json_is_a_fifo_is_listed_as_unreadable_never_left_out(tmp_path, monkeypatch):
    """A run.json planted as a FIFO: `runs` lists the run with why it is unreadable (it was left out
    without a word), and nothing waits on the FIFO."""
    import os

    from conftest import cli_in_process

    run = tmp_path / ".cagtool" / "runs" / "planted"
    run.mkdir(parents=True)
    os.mkfifo(run / "run.json")
    monkeypatch.chdir(tmp_path)
    code, out, err = cli_in_process("runs")
    assert code == 0 and "planted" in out and "is not a regular file (a FIFO, device or directory)" in out, (out, err)


@pytest.mark.parametrize(("status", "exit_codes", "exit_code", "listed"), [
    # cagtool killed before its second mode: the loader reads run.json as it is; ca never started.
    ("killed", {"eager": 0}, 137, "eager:finished, ca:not run"),
    # Still running (its cagtool process is this one, alive): ca has not started yet.
    ("running", {"eager": 0}, None, "eager:finished, ca:pending"),
    # A run that ended normally whose ca process ran (its exit code is noted) and left no record.
    ("finished", {"eager": 0, "ca": 1}, 1, "eager:finished, ca:missing"),
])
def test_runs_lists_every_mode_run_json_asked_for(tmp_path, status, exit_codes, exit_code, listed):
    """A mode run.json lists but that left no record is listed, never left out: `not run` where a
    stopped run never started it (as summary and compare say it), `pending` where the run is still
    going, `missing` where its process ran."""
    from conftest import cli_in_process

    from cagtool.record.liveness import this_process
    from cagtool.record.manifest import ModeManifest, RunMeta, to_dict

    run = tmp_path / "runs" / "r"
    (run / "eager").mkdir(parents=True)
    meta = RunMeta(run_id="r", created_at="2026-01-01T00:00:00Z", cagtool_argv=[], target={"kind": "script", "name": "train.py"},
                   target_argv=[], cwd=str(run), modes=["eager", "ca"], versions={}, machine={}, status=status,
                   exit_code=exit_code, mode_exit_codes=exit_codes, process=this_process())
    manifest = ModeManifest(mode="eager", argv=[], target={}, cwd=str(run), versions={}, backend="eager", dynamic=False,
                            started_at="2026-01-01T00:00:00Z", status="finished", exit_code=0)
    (run / "run.json").write_text(json.dumps(to_dict(meta)))
    (run / "eager" / "manifest.json").write_text(json.dumps(to_dict(manifest)))
    code, out, err = cli_in_process("runs", str(tmp_path / "runs"))
    assert code == 0, err
    (line,) = out.splitlines()[1:]
    assert re.search(rf"  {listed}  +{exit_code}$", line), out
