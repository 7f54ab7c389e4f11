"""The target sees the same __name__, argv, sys.path[0], cwd and __file__ under cagtool as under python."""

from __future__ import annotations

import json
import subprocess

import pytest
import sys
from pathlib import Path

from conftest import ROOT, cagtool_cmd

SCRIPTS = Path(__file__).parent / "scripts"


def _first_json_line(text: str) -> dict:
    return json.loads(next(line for line in text.splitlines() if line.startswith("{")))


@pytest.mark.slow
def test_script_sees_what_python_gives_it(tmp_path):
    script = "tests/scripts/transparency.py"
    args = ["--lr", "3e-4", "--steps", "2"]
    plain = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, cwd=ROOT)
    under = subprocess.run(
        cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), script, *args),
        capture_output=True, text=True, cwd=ROOT, env={**__import__("os").environ, "CI": "true"},
    )
    assert under.returncode == 0, under.stderr
    assert _first_json_line(under.stdout) == _first_json_line(plain.stdout)
    # cagtool's own output goes to stderr: the script's stdout is exactly its own.
    assert under.stdout == plain.stdout


@pytest.mark.slow
def test_module_mode_passes_args_after_double_dash(tmp_path):
    env = {**__import__("os").environ, "CI": "true", "PYTHONPATH": str(SCRIPTS)}
    plain = subprocess.run([sys.executable, "-m", "pkg_demo.train", "--lr", "3e-4"], capture_output=True, text=True, cwd=SCRIPTS, env=env)
    under = subprocess.run(
        cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), "-m", "pkg_demo.train", "--", "--lr", "3e-4"),
        capture_output=True, text=True, cwd=SCRIPTS, env=env,
    )
    assert under.returncode == 0, under.stderr
    assert _first_json_line(under.stdout) == _first_json_line(plain.stdout) == {"name": "__main__", "argv": ["--lr", "3e-4"], "path0": str(SCRIPTS)}


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--freeze",)], ids=["plain", "gc-frozen"])
def test_exit_duties_run_as_under_python(tmp_path, extra):
    """What the interpreter's exit does for a script (atexit handlers, joining a thread still
    running, flushing a file never closed whose namespace is a cycle) happens under cagtool as
    under python, and the exit code is the script's: a guard for any faster exit of the mode
    process (freezing the collector at exit lost that file's contents)."""
    script = "tests/scripts/exit_duties.py"
    seen = {}
    for name, cmd in (
        ("python", [sys.executable, script]),
        ("cagtool", cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "r"), script)),
    ):
        out = tmp_path / name
        out.mkdir()
        proc = subprocess.run([*cmd, str(out), *extra], capture_output=True, text=True, cwd=ROOT, env={**__import__("os").environ, "CI": "true"}, timeout=300)
        assert proc.returncode == 3, proc.stderr
        assert proc.stdout == "script done\n"
        seen[name] = {p.name: p.read_text() for p in sorted(out.iterdir())}
    assert seen["cagtool"] == seen["python"]
    assert seen["python"] == {"atexit.txt": "ran", "thread.txt": "joined", "unclosed.txt": "buffered " * 100}


@pytest.mark.slow
def test_seed_option_seeds_every_generator_or_none(tmp_path):
    """`--seed N` (default 0) seeds random, numpy and torch before the script runs, the same in
    every mode; `--seed off` leaves them as python does (two runs draw differently)."""
    script = "tests/scripts/prints_draws.py"
    env = {**__import__("os").environ, "CI": "true"}

    def draws(name: str, *seed: str, modes: str = "eager") -> list[dict]:
        # --backend eager: nothing compiles here, and the ca mode then never imports Inductor.
        proc = subprocess.run(cagtool_cmd("run", "--modes", modes, "--backend", "eager", "--no-report", "-o", str(tmp_path / name), *seed, script),
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    import random

    import numpy
    import torch

    random.seed(7)
    numpy.random.seed(7)
    torch.manual_seed(7)
    expected = {"random": random.random(), "numpy": float(numpy.random.rand()), "torch": float(torch.rand(())), "initial_seed": 7}
    assert draws("seven", "--seed", "7", modes="eager,ca") == [expected, expected]
    default = draws("default")
    assert default[0]["initial_seed"] == 0
    # Two modes of one run are two fresh processes, each starting the script as python would: they
    # draw differently (and a seed cagtool chose once for the run would make them agree).
    off = draws("off", "--seed", "off", modes="eager,ca")
    assert len(off) == 2 and off[0] != off[1] and 0 not in (off[0]["initial_seed"], off[1]["initial_seed"])
    from cagtool.record.loader import load_run

    for mode in ("eager", "ca"):
        assert load_run(tmp_path / "off").mode(mode).manifest.options["seed"] == {"seed": None, "seeded": [], "script_reseeded": None}, mode
    assert load_run(tmp_path / "seven").mode("ca").manifest.options["seed"] == {"seed": 7, "seeded": ["random", "torch", "numpy"], "script_reseeded": False}


def test_bad_seed_is_a_usage_error(tmp_path):
    proc = subprocess.run(cagtool_cmd("run", "--seed", "soon", "-o", str(tmp_path / "r"), "tests/scripts/prints_draws.py"), capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "--seed takes an integer" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_recorded_peak_memory_is_the_jobs_and_cagtools_own_is_said(tmp_path):
    """The peak RSS is read before cagtool's end-of-run work (float64 parameter norms), which
    squares a chunk at a time: the record's peak is the one the script saw at its end, and the
    summary says what cagtool's own work added (its float64 copy of the 64 MiB parameter added
    192 MiB before)."""
    env = {**__import__("os").environ, "CI": "true"}
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "r"), "tests/scripts/big_parameter.py"),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    seen = _first_json_line(proc.stdout)["peak_rss_bytes"]
    from cagtool.record.loader import load_run

    manifest = load_run(tmp_path / "r").mode("eager").manifest
    assert seen <= manifest.peak_rss_bytes <= seen + 16 * 2**20
    own = manifest.options["cagtool_memory"]
    assert own["pinned_host_bytes"] == 0 and own["losses_held_on_device"] == 0  # CPU: losses read at once
    assert 0 <= own["end_of_run_peak_rss_added_bytes"] < 32 * 2**20
    assert "cagtool's own memory: its end-of-run work (final norms, reading losses) raised the peaks by RSS +" in proc.stderr


@pytest.mark.slow
def test_a_compiled_step_that_steps_the_optimizer_compiles_as_under_python(tmp_path):
    """torch.compile traces the optimizer's global step hooks and a GradScaler's step() where a
    compiled function calls them: cagtool's must look to Dynamo as plain python's absence of hooks
    does (a skipped frame was a graph break more, and an error under fullgraph=True), so the
    graphs and graph breaks are the plain job's."""
    script = "tests/scripts/compiled_train_step.py"
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    under = subprocess.run(cagtool_cmd("run", "--modes", "aot", "--backend", "eager", "--no-report", "-o", str(tmp_path / "r"), script),
                           capture_output=True, text=True, cwd=ROOT, env={**__import__("os").environ, "CI": "true"}, timeout=300)
    assert plain.returncode == 0 and under.returncode == 0, under.stderr[-3000:]
    mine, theirs = (json.loads(p.stdout.strip().splitlines()[-1]) for p in (under, plain))
    assert mine["graph_break"] == theirs["graph_break"] and theirs["graph_break"]
    assert mine["stats"]["unique_graphs"] == theirs["stats"]["unique_graphs"]
    assert mine["stats"]["calls_captured"] == theirs["stats"]["calls_captured"]


@pytest.mark.slow
def test_torch_compile_returns_its_wrapper_in_every_mode_as_under_python(tmp_path):
    """The eager mode runs with Dynamo off, where torch.compile(module) would return the module
    itself; a script that reads `._orig_mod` or loads a compiled run's checkpoint (`_orig_mod.`
    keys) then failed in eager alone. Every mode prints what python prints."""
    script = "tests/scripts/compiled_module_wrapper.py"
    plain = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == [
        "wrapper: True True keys: _orig_mod.0.bias,_orig_mod.0.weight,_orig_mod.2.bias,_orig_mod.2.weight kept: 0.bias,0.weight,2.bias,2.weight",
        "disable=True returns the module: True",
    ]
    out = tmp_path / "r"
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager,aot", "--backend", "eager", "--no-report", "-o", str(out), script),
                          capture_output=True, text=True, cwd=ROOT, timeout=300, env={**__import__("os").environ, "CI": "true"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the script's lines, as each mode printed them (cagtool leaves the job's stdout to the job)
    for line in plain.stdout.splitlines():
        assert proc.stdout.count(line + "\n") == 2, proc.stdout
