"""`cagtool run` runs its target as python does, by one path (capture/run/target.py, run_target)
for a plain run and for `recompiles --verify`'s re-run, which only adds a check of the code's
SHA-256. A probe prints what its `__main__` module sees; under `python -m` / `python script.py`,
under `cagtool run --modes eager` and under verify's re-run of that record, it prints the same.

What cagtool legitimately does differently is not in the probe's output: stderr (cagtool's own
lines; a traceback without runpy's frames), the `.pyc` python -m writes of the module it runs
(cagtool compiles the module's source it read, `__cached__` names the same file), and what the
process imported before the target (cagtool and torch)."""

from __future__ import annotations

import json
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd

PROBE = '''\
import atexit, json, sys
try:
    from . import helper
    relative = helper.VALUE
except ImportError as exc:
    relative = f"ImportError: {exc}"
g = globals()
loader = g.get("__loader__")
print(json.dumps({
    "dunders": sorted(k for k in g if k.startswith("__")),
    "__name__": __name__, "__file__": g.get("__file__"), "__cached__": g.get("__cached__"),
    "__loader__": [type(loader).__name__, getattr(loader, "name", None), getattr(loader, "path", None)],
    "__package__": __package__, "__spec__": None if __spec__ is None else [__spec__.name, __spec__.origin, __spec__.parent],
    "__doc__": __doc__, "__builtins__": type(__builtins__).__name__,
    "argv": sys.argv, "path0": sys.path[0], "main_is_this_module": sys.modules["__main__"].__dict__ is g,
    "code_file": sys._getframe().f_code.co_filename, "relative_import": relative,
}, sort_keys=True))
atexit.register(lambda: print("at exit, argv[0]:", sys.argv[0]))
'''

# name -> (how python runs it, how cagtool run is given it)
TARGETS = {
    "module": (["-m", "pkg.probe", "a", "b"], ["-m", "pkg.probe", "--", "a", "b"]),
    "package": (["-m", "pkg", "x"], ["-m", "pkg", "--", "x"]),
    "namespace-package": (["-m", "ns", "y"], ["-m", "ns", "--", "y"]),
    "script": (["./probe_script.py", "s"], ["./probe_script.py", "s"]),
}


def _job(job: Path) -> None:
    """A regular package (whose __init__ says what sys.argv[0] is while it is imported), a
    namespace package with a __main__, and a script, each running the probe."""
    (job / "pkg").mkdir(parents=True)
    (job / "pkg" / "__init__.py").write_text("import sys\nprint('pkg/__init__ sees argv[0]:', sys.argv[0])\n")
    (job / "pkg" / "helper.py").write_text("VALUE = 'pkg.helper'\n")
    (job / "pkg" / "probe.py").write_text(PROBE)
    (job / "pkg" / "__main__.py").write_text(PROBE)
    (job / "ns").mkdir()
    (job / "ns" / "helper.py").write_text("VALUE = 'ns.helper'\n")
    (job / "ns" / "__main__.py").write_text(PROBE)
    (job / "probe_script.py").write_text(PROBE)


def _finish(procs: dict[str, subprocess.Popen]) -> dict[str, tuple[int, str, str]]:
    outputs = {name: proc.communicate(timeout=600) for name, proc in procs.items()}
    return {name: (procs[name].returncode, *outputs[name]) for name in procs}


def _runs_print_as_python(targets: dict, seen: dict[str, str], job: Path, tmp_path: Path, env: dict) -> None:
    """`cagtool run --modes eager` of each target, at once: each exits 0 and prints what python printed."""
    runs = _finish({name: subprocess.Popen(cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / name), *given),
                                           cwd=job, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                    for name, (_argv, given) in targets.items()})
    for name, (code, out, err) in runs.items():
        assert code == 0, (name, err[-3000:])
        assert out == seen[name], name


@pytest.mark.slow
def test_the_probe_sees_the_same_under_python_cagtool_run_and_verifys_re_run(tmp_path):
    from cagtool.record.loader import load_run
    from cagtool.capture.run.target import SOURCE_DIGEST_ENV
    from cagtool.verify.verification import checked_source_env, rerun_argv

    job = tmp_path / "job"
    _job(job)
    env = {**os.environ, "CI": "true"}
    plain = {name: subprocess.run([sys.executable, *argv], cwd=job, capture_output=True, text=True, env=env, timeout=300)
             for name, (argv, _given) in TARGETS.items()}
    for name, proc in plain.items():
        assert proc.returncode == 0, (name, proc.stderr)
    seen = {name: proc.stdout for name, proc in plain.items()}
    # What python gives, as this test reads it (the probe is not vacuous).
    module = json.loads(seen["module"].splitlines()[1])
    assert seen["module"].splitlines()[0] == "pkg/__init__ sees argv[0]: -m"
    assert module["argv"] == [str(job / "pkg" / "probe.py"), "a", "b"] and module["path0"] == str(job)
    assert module["__spec__"] == ["pkg.probe", str(job / "pkg" / "probe.py"), "pkg"] and module["relative_import"] == "pkg.helper"
    assert json.loads(seen["namespace-package"].splitlines()[0])["relative_import"] == "ns.helper"
    assert json.loads(seen["package"].splitlines()[1])["__spec__"][0] == "pkg.__main__"
    script = json.loads(seen["script"].splitlines()[0])
    assert script["__file__"] == str(job) + "/./probe_script.py" and script["argv"][0] == "./probe_script.py"

    _runs_print_as_python(TARGETS, seen, job, tmp_path, env)

    reruns = {}
    for name in TARGETS:
        record = load_run(tmp_path / name)
        checked = checked_source_env(record)
        assert SOURCE_DIGEST_ENV in checked, name  # the re-run checks the code's digest before it runs it
        reruns[name] = subprocess.Popen(rerun_argv(record, "eager", 1, tmp_path / f"{name}-rerun", None), cwd=record.meta.cwd,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                        env={**env, **checked})
    for name, (code, out, err) in _finish(reruns).items():
        assert code == 0, (name, err[-3000:])
        assert out == seen[name], name
        manifest = load_run(tmp_path / f"{name}-rerun").modes["eager"].manifest
        assert manifest.status == "finished" and manifest.exception is None, name


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_a_module_without_python_source_is_one_clear_line(tmp_path):
    """A C extension (python -m cannot run one either): exit 2, one line naming the file, no
    record. A `.pyc` without its source runs, as python -m runs it."""
    compiled = tmp_path / "compiled.py"
    compiled.write_text("print('ran from bytecode')\n")
    py_compile.compile(str(compiled), cfile=str(tmp_path / "compiled.pyc"))
    compiled.unlink()
    env = {**os.environ, "CI": "true"}
    plain = subprocess.run([sys.executable, "-m", "compiled"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 0 and plain.stdout == "ran from bytecode\n", plain.stderr
    proc = subprocess.run(cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "pyc"), "-m", "compiled"),
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ran from bytecode" in proc.stdout
    import importlib.util

    extension = importlib.util.find_spec("torch._C").origin
    proc = subprocess.run(cagtool_cmd("run", "-o", str(tmp_path / "r"), "-m", "torch._C"), cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and f"No code object available for torch._C ({extension} is a compiled extension" in _one_error_line(proc)
    assert not (tmp_path / "r").exists()


def test_cagtools_check_of_a_module_runs_none_of_the_jobs_code(tmp_path):
    """`cagtool run -m pkg.train` finds the module before any mode starts, without importing
    `pkg` (its __init__ runs in the mode process, once, as under python -m): a package __init__
    that leaves a mark is not run by a check that refuses the run, and one that does not parse is
    refused like the module itself."""
    mark = tmp_path / "init-ran"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write('ran')\n")
    (tmp_path / "pkg" / "train.py").write_text("def broken(:\n")
    env = {**os.environ, "CI": "true"}
    proc = subprocess.run(cagtool_cmd("run", "-o", str(tmp_path / "r"), "-m", "pkg.train"), cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "train.py is not valid Python" in _one_error_line(proc)
    assert not mark.exists()
    (tmp_path / "pkg" / "train.py").write_text("print('train')\n")
    (tmp_path / "pkg" / "__init__.py").write_text("def broken(:\n")
    proc = subprocess.run(cagtool_cmd("run", "-o", str(tmp_path / "r"), "-m", "pkg.train"), cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "__init__.py is not valid Python" in _one_error_line(proc)
    assert not (tmp_path / "r").exists()


BAD_NAMES = [".relative", "no_such_module", "pkg.no_such_module", "pkg", "ns", "pkg.__main__.x", "probe.py", "pkg.helper.x"]


def test_the_mode_process_says_what_python_m_says_of_a_module_it_cannot_run(tmp_path):
    """The words python -m ends with (runpy's) when it cannot run a module, said the same by the
    mode process's finder (it exits with them, code 1, as python -m does) and by the one cagtool's
    own process uses (found without importing; a package it did not import is named as one)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helper.py").write_text("")
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "helper.py").write_text("")
    (tmp_path / "probe.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    said = ("import sys\nfrom cagtool.capture.run.main_module import ModuleNotRunnable, main_spec\n"
            "sys.path[0] = sys.argv[2]\n"
            "try:\n    main_spec(sys.argv[1], import_parents=sys.argv[3] == 'import')\nexcept ModuleNotRunnable as exc:\n"
            "    print(f'{sys.executable}: {exc}')\n")
    for name in BAD_NAMES:
        python = subprocess.run([sys.executable, "-m", name], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
        assert python.returncode == 1 and python.stdout == "", (name, python.stderr)
        for how in ("import", "find"):
            ours = subprocess.run([sys.executable, "-c", said, name, str(tmp_path), how], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
            assert ours.returncode == 0, (name, ours.stderr)
            assert ours.stdout == python.stderr, (name, how)


def test_under_pythonsafepath_the_probe_sees_what_python_p_gives(tmp_path):
    """PYTHONSAFEPATH (python -P): python puts neither the script's directory nor the working
    directory first on sys.path; a module is found through PYTHONPATH only. `cagtool run` puts
    none either: the probe prints the same (its sys.path[0] is PYTHONPATH's first entry)."""
    job = tmp_path / "job"
    _job(job)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "CI": "true", "PYTHONSAFEPATH": "1",
           "PYTHONPATH": os.pathsep.join(p for p in [str(elsewhere), str(job), os.environ.get("PYTHONPATH", "")] if p)}
    targets = {name: TARGETS[name] for name in ("module", "script")}
    plain = {name: subprocess.run([sys.executable, *argv], cwd=job, capture_output=True, text=True, env=env, timeout=300)
             for name, (argv, _given) in targets.items()}
    for name, proc in plain.items():
        assert proc.returncode == 0, (name, proc.stderr)
    seen = {name: proc.stdout for name, proc in plain.items()}
    assert json.loads(seen["script"].splitlines()[0])["path0"] == str(elsewhere)  # not the script's directory
    assert json.loads(seen["module"].splitlines()[1])["path0"] == str(elsewhere)  # not the working directory
    _runs_print_as_python(targets, seen, job, tmp_path, env)
