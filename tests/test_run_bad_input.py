"""Bad input to `cagtool run`: one clear line on stderr and a documented exit code; the record
is complete whatever the target does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd, cagtool_in_process

from cagtool.record.loader import load_run
from cagtool.record.schema import StepEvent

SCRIPTS = Path(__file__).parent / "scripts"
ENV = {**os.environ, "CI": "true"}


def _run(tmp_path, *args, env=None):
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), *args)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env or ENV, timeout=300)


def _one_error_line(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cagtool: error: ")
    assert "Traceback" not in proc.stderr
    return lines[0]


def test_missing_script(tmp_path):
    proc = _run(tmp_path, "no_such_train.py")
    assert proc.returncode == 2
    assert "script not found: no_such_train.py" in _one_error_line(proc)


def test_not_valid_python(tmp_path):
    proc = _run(tmp_path, str(SCRIPTS / "not_python.py"))
    assert proc.returncode == 2
    assert "is not valid Python" in _one_error_line(proc)


def test_module_not_found(tmp_path):
    proc = _run(tmp_path, "-m", "no_such_pkg.train")
    assert proc.returncode == 2
    assert "module not found: no_such_pkg.train" in _one_error_line(proc)


def test_output_dir_not_writable(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = subprocess.run(cagtool_cmd("run", "-o", str(blocker / "run"), str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode == 2
    assert "cannot write the run record" in _one_error_line(proc)


def test_bad_modes_option(tmp_path):
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca,fast", str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode == 2
    assert "--modes" in _one_error_line(proc)


@pytest.mark.parametrize("args, said", [
    (("--max-time", "nan"), "--max-time takes seconds from 0.1 to"),
    (("--max-time", "inf"), "--max-time takes seconds from 0.1 to"),
    (("--max-time", "1e10"), "--max-time takes seconds from 0.1 to"),
    (("--max-time", "0.05"), "--max-time takes seconds from 0.1 to"),
    (("--json", "/nonexistent-dir/x.json"), "cannot write --json /nonexistent-dir/x.json: no directory"),
    (("--json", "/"), "cannot write --json /: it is a directory"),
    (("--gate",), "--gate with no gate thresholds"),
])
def test_arguments_the_end_of_the_run_needs_are_checked_before_the_script_runs(tmp_path, args, said):
    """An hours-long CI job must not run to its end to fail on its own options (a timer torch's
    process cannot set, a --json file it cannot write, a gate with nothing to check)."""
    marker = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", *args, "-o", str(tmp_path / "r"), str(script)),
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120)
    assert proc.returncode == 2 and said in _one_error_line(proc)
    assert not marker.exists() and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_script_raises_mid_training_record_is_complete(tmp_path):
    proc = _run(tmp_path, str(SCRIPTS / "crash_mid_training.py"))
    assert proc.returncode == 1
    # The target's own traceback is shown, as python would, without cagtool's frames.
    assert "RuntimeError: boom at step 3" in proc.stderr and "cagtool/capture" not in proc.stderr
    ca = load_run(tmp_path / "r").modes["ca"]
    assert ca.manifest.status == "failed" and ca.manifest.exit_code == 1
    assert ca.manifest.exception.type == "RuntimeError" and "boom" in ca.manifest.exception.message
    assert [s.step for s in ca.of(StepEvent)] == [0, 1, 2]  # the steps the script finished before its step 3 raised
    assert "mode ca: failed, exit 1" in proc.stderr  # the summary is still printed


@pytest.mark.slow
@pytest.mark.parametrize("given, status", [("7", 7), ("300", 44), ("2", 2)])
def test_sys_exit_code_passes_through(tmp_path, given, status):
    """The process's status as python's would be (sys.exit(300) is 44 to a shell), and the record says
    the same. The script is given `--steps 5 --modes=ca`, cagtool run's own options written after the
    script: where every mode exits with 2, an argument parser's usage error, the last line says they
    went to the script; any other status says nothing of them (a script may take `--steps` itself)."""
    proc = _run(tmp_path, str(SCRIPTS / "exit_code.py"), given, "--steps", "5", "--modes=ca")
    assert proc.returncode == status
    ca = load_run(tmp_path / "r").modes["ca"]
    assert ca.manifest.exit_code == status and len(ca.of(StepEvent)) == 1
    told = ("cagtool: every mode exited with code 2 (a usage error?), and the script was given --steps, --modes: cagtool run's "
            "own options, which after the script go to the script; put them before it: cagtool run [OPTIONS] SCRIPT [ARGS]...")
    assert (proc.stderr.splitlines()[-1] == told) == (status == 2), proc.stderr[-1500:]


@pytest.mark.slow
def test_ctrl_c_keeps_the_record(tmp_path):
    cmd = cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(tmp_path / "r"), str(SCRIPTS / "endless_training.py"))
    # SIGINT back to its default in the child: a runner that starts the suite as a background job
    # without job control makes every descendant inherit an *ignored* SIGINT, and then python (and
    # so cagtool, like python) ignores Ctrl-C.
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    ca = load_run(tmp_path / "r").modes["ca"]
    assert ca.manifest.status == "interrupted" and ca.manifest.exit_code == 130
    assert len(ca.of(StepEvent)) >= 2


@pytest.mark.slow
def test_torch_without_compiled_autograd(tmp_path):
    env = {**ENV, "PYTHONPATH": str(SCRIPTS / "no_ca_torch")}
    proc = _run(tmp_path, str(SCRIPTS / "exit_code.py"), env=env)
    assert proc.returncode == 2
    assert "has no compiled autograd" in _one_error_line(proc)


def test_report_commands_on_missing_and_garbage_runs(tmp_path):
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "run.json").write_text("{not json")
    # In-process, through the CLI's own entry point (conftest.cagtool_in_process): a report command
    # reads records and starts nothing, and its error handling is the same in a new interpreter.
    (tmp_path / "train.py").write_text("print(1)\n")  # a script given where a run was meant: named, not its folder
    for target, expected in ((tmp_path / "nothing", "no run at"), (tmp_path / "garbage", "not valid JSON"),
                             (tmp_path / "train.py", f"{tmp_path / 'train.py'} is a file, not a cagtool run directory")):
        proc = cagtool_in_process("summary", str(target))
        assert proc.returncode == 3
        assert expected in _one_error_line(proc)
    proc = cagtool_in_process("summary", cwd=tmp_path, unset=("CAGTOOL_RUNS_DIR",))
    assert proc.returncode == 3 and "no runs recorded yet" in _one_error_line(proc)


def test_misspelt_option_before_script(tmp_path):
    proc = subprocess.run(cagtool_cmd("run", "--max-recompile", "0", str(SCRIPTS / "exit_code.py")), capture_output=True, text=True, cwd=ROOT, env=ENV)
    assert proc.returncode == 2
    assert "no such option: --max-recompile" in _one_error_line(proc)


@pytest.mark.slow
def test_run_gate_fails_the_run_when_a_check_fails(record_run):
    # The session's gated recording of op_loop.py (4 CA graphs, above the limit of 1), which the
    # HTML report tests read too: `cagtool run --modes ca --backend eager --gate ...`, as here.
    proc = record_run("op_loop.py", extra=("--gate", "--max-ca-graphs", "1", "--no-config"))
    assert proc.returncode == 1, proc.stderr
    assert "max-ca-graphs" in proc.stderr
    assert proc.stdout == ""  # the gate report goes to stderr; stdout is the script's


@pytest.mark.slow
def test_steps_and_max_time_bound_a_run_cleanly(tmp_path, record_run):
    """--steps and --max-time stop a script before its own end, and the run ends cleanly. --steps:
    the session's `--modes eager --steps 2` recording of grad_accumulation.py (3 optimizer steps
    of its own), which test_steps.py reads for how --steps counts: had --steps not stopped it, its
    third step would be there and no stop reason. --max-time: a script that never ends."""
    by_steps = record_run("grad_accumulation.py", modes="eager", extra=("--steps", "2"))
    assert by_steps.returncode == 0, by_steps.stderr
    stopped = load_run(by_steps.path).modes["eager"]
    assert [s.step for s in stopped.of(StepEvent)] == [0, 1]
    assert stopped.manifest.status == "finished" and stopped.manifest.options["stopped_by"] == "steps"
    assert "(stopped by --steps)" in by_steps.stderr
    # The time bound in the eager mode: --max-time is the mode process's own timer, the same in
    # every mode, and ca's first backward compiles its graph, which took 3.6 s of 4 on a loaded
    # machine (one step recorded, not the two asserted). An eager step takes microseconds, and the
    # script spins a core until the timer fires: 1 s of it is enough for the steps asserted.
    script = str(SCRIPTS / "endless_training.py")
    by_time = subprocess.run(
        cagtool_cmd("run", "--modes", "eager", "--max-time", "1", "-o", str(tmp_path / "t"), script),
        capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300,
    )
    assert by_time.returncode == 0, by_time.stderr
    eager = load_run(tmp_path / "t").modes["eager"]
    assert eager.manifest.status == "finished" and eager.manifest.options["stopped_by"] == "max_time"
    steps = eager.of(StepEvent)
    assert len(steps) >= 2
    # The timer starts before the script's first step: every step falls inside the 1 s after it
    # (give or take the one step that was running). The mode's whole duration also counts starting
    # python and importing torch, which took 33 s on a loaded machine.
    assert steps[-1].t - steps[0].t < 1 + 1, (steps[0].t, steps[-1].t)
    assert "(stopped by --max-time)" in by_time.stderr


@pytest.mark.slow
def test_a_jobs_traceback_shows_no_frame_of_cagtools_taps_in_the_process_or_its_children(tmp_path):
    """A backward's error passes the step tracker's `_engine_run_backward`, a tap of torch's: the
    traceback showed cagtool/capture/steps/hooks.py where python shows torch's autograd/graph.py,
    which reads as cagtool's failure. The mode process's traceback and a followed child's (its
    sys.excepthook, as a DDP rank's) leave cagtool's frames out, chained exceptions' too; torch's
    and the script's frames stay."""
    script = tmp_path / "job.py"
    script.write_text(
        "import subprocess, sys, torch\n"
        "code = ('import torch\\nx = torch.randn(2)\\ntry:\\n    (x * 2).sum().backward()\\n'\n"
        "        'except RuntimeError as e:\\n    raise ValueError(\"wrapped\") from e\\n')\n"
        "child = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)\n"
        "sys.stderr.write('CHILD ' + str(child.returncode) + '\\n' + child.stderr + 'END CHILD\\n')\n"
        "x = torch.randn(3)\n"
        "(x * 2).sum().backward()\n")
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "r"), str(script)),
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 1, proc.stderr
    child = proc.stderr.split("CHILD 1\n")[1].split("END CHILD")[0]
    parent = proc.stderr.split("END CHILD")[1]
    for text in (child, parent):
        assert "RuntimeError: element 0 of tensors does not require grad" in text and "torch/autograd/__init__.py" in text, text
        assert "cagtool/" not in text.split("mode eager: failed")[0], text
    assert "The above exception was the direct cause of the following exception" in child and "ValueError: wrapped" in child
    assert 'line 7, in <module>' in parent and 'line 4, in <module>' in child  # the script's own lines, as python names them
