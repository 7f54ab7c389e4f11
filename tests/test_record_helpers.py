"""The small pieces capture, the API and import share: torch's counters as the record keeps them,
the versions and machine a record names, and /proc/PID/stat read once for all."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cagtool.capture.torch_counters import counter_delta
from cagtool.capture.versions import machine_info, record_versions
from cagtool.record.liveness import proc_stat


def test_counter_delta_keeps_what_changed_and_the_counters_reports_read():
    before = {"stats": {"calls_captured": 4}, "frames": {"total": 2}, "compiled_autograd": {"captures": 1}}
    after = {"stats": {"calls_captured": 4}, "frames": {"total": 5, "ok": 1}, "compiled_autograd": {"captures": 1}, "graph_break": {"x": 2}}
    assert counter_delta(before, after) == {"stats": {}, "frames": {"total": 3, "ok": 1}, "compiled_autograd": {}, "graph_break": {"x": 2}}


def test_versions_and_machine_name_the_same_keys_everywhere():
    import cagtool

    without = record_versions(None)
    assert list(without) == ["cagtool", "depyf", "python"] and without["cagtool"] == cagtool.__version__
    assert list(record_versions("2.13.0")) == ["cagtool", "torch", "depyf", "python"]
    machine = machine_info()
    assert set(machine) == {"hostname", "platform", "processor", "cpu_model", "cpu_count", "python", "reference_loop_s"}
    assert set(machine_info(reference=False)) == set(machine) - {"reference_loop_s"}
    # The reference loop: a positive number of CPU seconds within the bounds the gate accepts.
    assert 1e-5 < machine["reference_loop_s"] < 10.0
    if os.path.exists("/proc/cpuinfo"):
        assert machine["cpu_model"]  # x86's "model name" (or arm64's "Model") is read


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc")
def test_proc_stat_splits_after_a_command_name_with_parentheses_and_spaces(tmp_path):
    # The command name (field 2) is the executable's name, which may hold ") (": the fields are
    # read after its last `)`.
    odd = tmp_path / "a) (b"
    odd.symlink_to(sys.executable)
    proc = subprocess.Popen([str(odd), "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        fields = proc_stat(proc.pid)
        assert fields is not None and int(fields[1]) == os.getpid() and fields[0] in (b"R", b"S")
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc_stat(proc.pid) is None  # reaped: no such process
