"""Two runs into one directory: exactly one claims it, the other gets the documented usage error
(exit 2, "already holds a run"), never an internal error, and the winner's record is untouched.
`cagtool run` and `cagtool.capture()` claim through the same helper (capture/run_dir.py)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest
from conftest import ROOT, cagtool_cmd

from cagtool.capture.run.orchestrate import RunOptions, make_run_dir
from cagtool.capture.run_dir import claim_run_dir
from cagtool.capture.run.target import Target
from cagtool.errors import EXIT_USAGE, UsageError

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true"}


def _options(output: Path) -> RunOptions:
    return RunOptions(target=Target("script", str(SCRIPTS / "exit_code.py"), ["0"]), modes=("ca",), output=output, backend="eager")


def test_the_second_claim_of_an_output_directory_is_a_usage_error(tmp_path):
    # A check-then-write claim would let both pass make_run_dir (no mode directory exists yet) and collide later.
    first = make_run_dir(_options(tmp_path / "r"))
    with pytest.raises(UsageError, match="already holds a run") as error:
        make_run_dir(_options(tmp_path / "r"))
    assert error.value.exit_code == EXIT_USAGE
    assert first == tmp_path / "r" and (first / "ca").is_dir()


def test_claims_at_the_same_instant_have_one_winner(tmp_path):
    contenders = 8
    barrier = threading.Barrier(contenders)
    won: list[Path] = []
    lost: list[BaseException] = []

    def contend() -> None:
        barrier.wait()
        try:
            won.append(claim_run_dir(tmp_path / "r", tmp_path, "x", "ca"))
        except BaseException as exc:  # anything but the usage error fails the test below
            lost.append(exc)

    threads = [threading.Thread(target=contend) for _ in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1
    assert len(lost) == contenders - 1
    assert all(isinstance(exc, UsageError) and "already holds a run" in str(exc) for exc in lost), lost


def test_named_runs_started_together_get_their_own_directories(tmp_path):
    paths = [claim_run_dir(None, tmp_path, "train", "ca") for _ in range(3)]
    assert len(set(paths)) == 3
    assert all((p / "ca").is_dir() for p in paths)


def test_cagtool_run_into_a_claimed_directory_exits_2_and_leaves_the_record_alone(tmp_path):
    # The moment of the race: the winner has claimed the directory, its run.json not yet written.
    out = tmp_path / "r"
    make_run_dir(_options(out))
    proc = subprocess.run(
        cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(out), str(SCRIPTS / "exit_code.py"), "0"),
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"cagtool: error: {out} already holds a run; choose another -o directory"]
    assert sorted(p.name for p in out.iterdir()) == ["ca"]
    assert list((out / "ca").iterdir()) == []


def test_the_python_api_refuses_a_claimed_directory(tmp_path):
    import cagtool

    claim_run_dir(tmp_path / "r", tmp_path, "x", "ca")
    with pytest.raises(UsageError, match="already holds a run"):
        with cagtool.capture(output=tmp_path / "r", backend="eager"):
            pass


def test_an_output_inside_another_runs_folder_is_refused_and_nothing_is_made_there(tmp_path):
    """`import LOG -o RUN/ca` wrote an imported run into another run's mode folder, which every
    reader then took for that mode: an output inside a cagtool run's folder (a run.json of cagtool's
    above it) is a usage error before anything is made; a project's own run.json is not a run."""
    import json

    run = tmp_path / "run"
    (run / "ca").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"format": "cagtool-run", "version": 3, "modes": ["ca"]}))
    for inside in (run / "ca", run / "ca" / "graphs" / "new"):
        with pytest.raises(UsageError, match=f"is inside the run {run}: a record is not written into another run's folder") as error:
            claim_run_dir(inside, tmp_path / "runs", "job", "ca")
        assert error.value.exit_code == EXIT_USAGE
    # A link to the mode folder leads inside the run all the same.
    (tmp_path / "linkca").symlink_to(run / "ca", target_is_directory=True)
    with pytest.raises(UsageError, match=f"is inside the run {run}"):
        claim_run_dir(tmp_path / "linkca", tmp_path / "runs", "job", "ca")
    assert sorted(p.name for p in (run / "ca").iterdir()) == []
    project = tmp_path / "project"
    project.mkdir()
    (project / "run.json").write_text(json.dumps({"name": "a project's own config"}))
    assert claim_run_dir(project / "out", tmp_path / "runs", "job", "ca") == project / "out"
