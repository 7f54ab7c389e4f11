"""The suite's own rules, checked: a test that leaves a process running fails; one that ends
what it started passes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def _pytest_with_our_conftest(tmp_path, files: dict[str, str], *args: str, **run) -> subprocess.CompletedProcess:
    """A pytest session of its own, on `files` beside a copy of the suite's conftest.py."""
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args, str(tmp_path)],
                          capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=300, **run)

LEAVES_ONE = '''
import subprocess, sys

def test_leaves_a_process_running():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])

def test_ends_what_it_started():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    proc.kill()  # not waited for: a zombie, or a process still exiting, is not left running

def test_waits_for_what_it_started():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


@pytest.mark.slow
def test_a_test_that_leaves_a_process_running_fails(tmp_path):
    proc = _pytest_with_our_conftest(tmp_path, {"test_leak.py": LEAVES_ONE}, "-rA")
    out = proc.stdout
    assert "ERROR test_leak.py::test_leaves_a_process_running" in out and "killed 1 process(es) the test left running" in out, out
    assert "PASSED test_leak.py::test_ends_what_it_started" in out, out
    assert "PASSED test_leak.py::test_waits_for_what_it_started" in out, out
    assert proc.returncode == 1


def test_no_test_module_imports_another():
    """Helpers shared between test modules live in conftest.py or a helper module beside them
    (rank_records.py, recompile_records.py): importing a test module from another runs its
    module-level code twice under two names and ties one file's tests to another's internals."""
    import ast

    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "scripts" in path.relative_to(ROOT / "tests").parts:
            continue  # the jobs the tests run, not tests
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno} imports {name}" for name in names if name.rsplit(".", 1)[-1].startswith("test_")]
    assert found == []


CHILD_SIGINT = '''
import subprocess, sys

def test_a_job_the_suite_starts_stops_on_ctrl_c():
    code = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"
'''


def test_a_suite_started_in_the_background_still_gives_its_jobs_ctrl_c(tmp_path):
    """A shell without job control starts `pytest &` with SIGINT ignored, and every job a test
    starts would inherit that: the Ctrl-C tests (test_rank_faults.py, test_reliability.py) waited
    for a job that never stopped. conftest.py gives the suite's processes SIGINT back."""
    import signal

    proc = _pytest_with_our_conftest(tmp_path, {"test_child_sigint.py": CHILD_SIGINT},
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert proc.returncode == 0, proc.stdout[-3000:]


ORDER_A = '''
import pytest

def test_a_quick(): pass

@pytest.mark.slow
def test_a_slow(): pass
'''

ORDER_B = '''
import pytest

pytestmark = pytest.mark.slow

def test_b_slow(): pass
'''


def test_the_slow_tests_run_first_in_their_files_order(tmp_path):
    """A run ends on quick tests (conftest.py's ordering): a slow test, marked on the function or
    the module, comes before every unmarked one, and each group keeps the files' order."""
    proc = _pytest_with_our_conftest(tmp_path, {"test_a.py": ORDER_A, "test_b.py": ORDER_B}, "--collect-only")
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids == ["test_a.py::test_a_slow", "test_b.py::test_b_slow", "test_a.py::test_a_quick"], proc.stdout


def _ids(tests, order):
    return [tests[i][0] for i in order]


LISTED = {"t/m.py": 100.0, "t/a.py::test_big": 60.0, "t/b.py::test_p": 30.0}
COLLECTED = [
    ("t/a.py::test_quick", False), ("t/a.py::test_big", True), ("t/a.py::test_slow", True),
    ("t/b.py::test_p[1]", True), ("t/b.py::test_p[2]", True), ("t/b.py::test_q", True),
    ("t/m.py::test_one", True), ("t/m.py::test_quick_on_its_fixture", False), ("t/m.py::test_two", True),
    *[(f"t/z.py::test_{k}", False) for k in range(11)],
]


def test_one_process_runs_the_listed_slowest_first_each_files_group_together():
    """The listed tests heaviest first (a listed file's tests as one group, in its order, quick
    ones on its fixture too; a listed test's parametrizations each on its own), then the other
    slow tests by file, then the quick ones in their files' order; nothing lost or repeated."""
    from conftest import run_order

    order = run_order(COLLECTED, 1, LISTED)
    assert sorted(order) == list(range(len(COLLECTED)))
    assert _ids(COLLECTED, order)[:9] == [
        "t/m.py::test_one", "t/m.py::test_quick_on_its_fixture", "t/m.py::test_two", "t/a.py::test_big",
        "t/b.py::test_p[1]", "t/b.py::test_p[2]", "t/a.py::test_slow", "t/b.py::test_q", "t/a.py::test_quick",
    ]


def test_under_worksteal_each_workers_chunk_starts_with_its_share_of_the_slowest():
    """worksteal hands worker k the k-th contiguous chunk of the order: with 3 workers the three
    heaviest groups start the three chunks at once (not one after another on one worker), the
    next goes where the least time is, and the chunks' sizes are xdist's."""
    from conftest import chunk_sizes, run_order

    sizes = chunk_sizes(len(COLLECTED), 3)
    assert sizes == [6, 7, 7] and sum(chunk_sizes(1383, 3)) == 1383
    ids = _ids(COLLECTED, run_order(COLLECTED, 3, LISTED))
    chunks = [ids[:6], ids[6:13], ids[13:]]
    assert [chunk[0] for chunk in chunks] == ["t/m.py::test_one", "t/a.py::test_big", "t/b.py::test_p[1]"]
    assert chunks[0][:3] == ["t/m.py::test_one", "t/m.py::test_quick_on_its_fixture", "t/m.py::test_two"]
    assert chunks[2][:2] == ["t/b.py::test_p[1]", "t/b.py::test_p[2]"]  # 30 + 30 s beside 60 s and 100 s
    assert sorted(ids) == sorted(t for t, _ in COLLECTED)


def test_every_listed_slowest_test_exists():
    """An entry left behind by a renamed test or file would order nothing, silently."""
    import ast

    from conftest import SLOWEST

    for entry in SLOWEST:
        path, _, name = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        if name:
            defined = {node.name for node in ast.walk(ast.parse((ROOT / path).read_text())) if isinstance(node, ast.FunctionDef)}
            assert name in defined, entry
