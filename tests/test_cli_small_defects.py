"""Small command-line defects, each pinned: `runs` on a path that is no directory, the `next:` hints
quoted for a shell, `--debug` after the command name, one exit code for an id the record lacks,
a gate flag given twice, `export --perfetto -`, a record whose manifest is missing, `--version`.
Every test that reads a record reads the session's shared `mlp_steps.py` recording (eager, ca)."""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, cli_in_process


@pytest.fixture(scope="module")
def mlp_run(record_run, tmp_path_factory):
    """A copy of `cagtool run --modes eager,ca --backend eager sample_scripts/mlp_steps.py` under a
    directory whose name has a space (as a user's `/tmp/my runs/x`)."""
    recorded = record_run("mlp_steps.py", modes="eager,ca")
    assert recorded.returncode == 0, recorded.stderr
    run = tmp_path_factory.mktemp("small-defects") / "my runs" / "x"
    shutil.copytree(recorded.path, run)
    return run


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# 1. `cagtool runs PATH`


def test_runs_refuses_a_missing_directory_or_a_file(tmp_path):
    code, out, err = cli_in_process("runs", str(tmp_path / "nowhere"))
    assert code == 3 and out == "" and f"no such directory: {tmp_path / 'nowhere'}" in _one_line(err)
    file = tmp_path / "run.json"
    file.write_text("{}")
    code, out, err = cli_in_process("runs", str(file))
    assert code == 3 and out == "" and f"not a directory: {file}" in _one_line(err)
    # An empty directory, and the default one missing, are only "no runs yet".
    code, out, err = cli_in_process("runs", str(tmp_path))
    assert code == 0 and out.startswith("no runs under") and err == ""
    code, out, err = cli_in_process("runs", cwd=tmp_path)
    assert code == 0 and out.startswith("no runs under .cagtool/runs")


# 2. the `next:` hints


def test_next_hints_quote_a_path_with_spaces(mlp_run, capsys):
    from cagtool.commands.summary import print_run_report

    print_run_report(str(mlp_run), after_run=True)
    err = capsys.readouterr().err
    hints = [line.removeprefix("next:").strip() for line in err.splitlines()[err.splitlines().index(f"record: {mlp_run}") + 1:]]
    assert hints[0] == f"cagtool summary {shlex.quote(str(mlp_run))}", err
    for hint in hints:
        words = shlex.split(hint)
        assert words[0] == "cagtool" and words[-1] == str(mlp_run), hint  # the path pastes as one argument


# 3. `--debug` after the command name


def test_debug_is_accepted_after_the_command_name_too(tmp_path):
    missing = str(tmp_path / "nowhere")
    code, _out, err = cli_in_process("summary", missing)
    assert code == 3 and "no run at" in _one_line(err)
    for args in (("--debug", "summary", missing), ("summary", missing, "--debug"), ("baseline", "save", missing, "--debug")):
        code, _out, err = cli_in_process(*args)
        assert code == 3 and "Traceback" in err and err.strip().endswith(f"cagtool: error: no run at {missing}"), (args, err)
    # After run's SCRIPT, --debug is the script's argument, as every argument there is.
    script = str(tmp_path / "missing.py")
    code, _out, err = cli_in_process("run", script, "--debug")
    assert code == 2 and "script not found" in _one_line(err)
    code, _out, err = cli_in_process("run", "--debug", script)
    assert code == 2 and "Traceback" in err
    summary_help = " ".join(cli_in_process("summary", "--help")[1].split())
    assert "--debug Show full tracebacks for errors (also accepted before the command name)" in summary_help


# 4. an id the record lacks: one exit code


def test_an_id_the_record_lacks_exits_3_in_compile_and_diff_graphs(mlp_run):
    code, _out, err = cli_in_process("compile", str(mlp_run), "9/9")
    assert code == 3 and "no compile [9/9]" in _one_line(err)
    code, _out, err = cli_in_process("diff-graphs", str(mlp_run), "0", "9")
    assert code == 3 and "has no graph 9" in _one_line(err)
    code, _out, err = cli_in_process("compile", str(mlp_run), "not-an-id")  # malformed: a usage error
    assert code == 2 and "not a compile id" in _one_line(err)


# 5. a gate flag given twice


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--max-ca-graphs", "1", "--max-ca-graphs", "3"), "--max-ca-graphs given 2 times (1, 3)"),
        (("--max-graph-breaks", "0", "--max-graph-breaks", "2"), "--max-graph-breaks given 2 times"),
        (("--gate-config", "a.toml", "--gate-config", "b.toml"), "given 2 times (a.toml, b.toml)"),  # gate: --config/--gate-config
        (("--min-speedup", "1.1", "--min-speedup", "1.3"), "--min-speedup: ca/aot given twice (1.1, 1.3)"),
        (("--max-recompiles", "ca:0", "--max-recompiles", "ca:3"), "--max-recompiles: ca given twice (ca:0, ca:3)"),
        (("--max-memory-ratio", "1.1", "--max-memory-ratio", "ca/aot:1.3"), "--max-memory-ratio: ca/aot given twice"),
        (("--max-regression", "10", "--max-regression", "median:20%"), "--max-regression: median given twice"),
    ],
)
def test_a_gate_flag_given_twice_is_refused(tmp_path, flags, named):
    code, _out, err = cli_in_process("gate", str(tmp_path), "--no-config", *flags, cwd=tmp_path)
    assert code == 2 and named in _one_line(err), err
    # `run --gate` shares the flags: refused before anything runs.
    code, _out, err = cli_in_process("run", "--gate", "--no-config", *flags, str(tmp_path / "train.py"), cwd=tmp_path)
    assert code == 2 and named in _one_line(err), err


def test_one_threshold_per_key_still_passes(mlp_run):
    code, out, err = cli_in_process("gate", str(mlp_run), "--no-config", "--max-ca-graphs", "1", "--max-recompiles", "ca:0", "--max-recompiles", "dynamo:3")
    assert code == 0 and "gate passed" in out, (out, err)


# 6. `export --perfetto -`


def test_export_perfetto_dash_writes_to_stdout(mlp_run, tmp_path):
    code, out, err = cli_in_process("export", str(mlp_run), "--perfetto", "-", cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["traceEvents"] and not (tmp_path / "-").exists() and "trace:" not in err
    assert "- writes it to stdout" in " ".join(cli_in_process("export", "--help")[1].split())


# 7. a record whose manifest is missing


def test_a_missing_manifest_reads_as_a_damaged_record(mlp_run, tmp_path):
    from cagtool.record.loader import load_run
    from cagtool.report.figures.pooled import mode_columns

    run = tmp_path / "run"
    shutil.copytree(mlp_run, run)
    (run / "ca" / "manifest.json").unlink()
    reason = mode_columns(load_run(run))["ca"].failures[0].reason
    assert "manifest.json is missing: a damaged record" in reason and "died before starting" not in reason, reason
    code, out, _err = cli_in_process("summary", str(run))
    assert code == 0 and "manifest.json is missing" in out and "died before starting" not in out
    assert "mode ca: no record (its manifest.json is missing: a damaged record" in " ".join(out.split()), out
    assert "did not start or was killed" not in out
    code, out, _err = cli_in_process("compare", str(run))
    assert code == 0 and "it failed before a steady step" not in out and "no record of it to read" in out, out
    (run / "ca" / "events.jsonl").write_text("")  # the process opened its record and wrote no manifest
    assert "wrote no manifest" in mode_columns(load_run(run))["ca"].failures[0].reason
    (run / "ca" / "events.jsonl").unlink()  # nothing of the process there: it did not start
    assert "died before starting the target" in mode_columns(load_run(run))["ca"].failures[0].reason


# 8. `--version`


def test_version_names_cagtool_and_torch_without_importing_torch():
    code, out, err = cli_in_process("--version")
    assert code == 0 and err == ""
    assert out.strip() == f"cagtool {importlib.metadata.version('cagtool')} (torch {importlib.metadata.version('torch')})"
    assert "--version" in cli_in_process("--help")[1]
    probe = "import sys\nfrom cagtool.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\nprint('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["cagtool", importlib.metadata.version("cagtool"), f"(torch", f"{importlib.metadata.version('torch')})", "False"], proc


def test_a_compile_hint_pastes_into_an_interactive_shell():
    """A CA graph's compile id `!0/1/0` unquoted is a history expansion to an interactive bash
    ("event not found"); a run path with a space two arguments: the hint quotes both."""
    from cagtool.report.compiles.detail import detail_command

    hint = detail_command("/tmp/my runs/x", "!0/1/0", "aot")
    assert hint == "cagtool compile '/tmp/my runs/x' '!0/1/0' --mode aot"
    assert shlex.split(hint) == ["cagtool", "compile", "/tmp/my runs/x", "!0/1/0", "--mode", "aot"]
    assert detail_command("r", "0/1") == "cagtool compile r 0/1"  # nothing to quote: as before


# 9. A spread of one step


def test_one_steady_step_is_said_without_a_p10_and_p90_that_are_itself(record_run):
    """time_sequence_prediction (LBFGS, 3 steps, compiled): one steady step read "median 835.60 ms
    (p10 835.60 ms, p90 835.60 ms) over 1 steady step"."""
    recorded = record_run("mlp_steps.py", "--steps", "2", modes="eager")
    assert recorded.returncode == 0, recorded.stderr
    code, text, _ = cli_in_process("summary", str(recorded.path))
    [line] = [line for line in text.splitlines() if line.strip().startswith("step time:")]
    assert code == 0 and line.strip().endswith("over 1 steady step") and "p10" not in line, line
