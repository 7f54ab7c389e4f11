"""What a record says about the software and machine that made it (run.json and every manifest)."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time


def record_versions(torch_version: str | None) -> dict[str, str]:
    """cagtool's, torch's (None: not known here, e.g. a process that never imported torch, or a
    parent that must not import it), depyf's and Python's versions."""
    import cagtool

    try:
        from importlib.metadata import version

        depyf_version = version("depyf")
    except Exception:  # noqa: BLE001 - any metadata trouble: the record says so instead of failing
        depyf_version = "not installed"
    versions = {"cagtool": cagtool.__version__}
    if torch_version is not None:
        versions["torch"] = torch_version
    versions.update(depyf=depyf_version, python=platform.python_version())
    return versions


def imported_torch_version() -> str:
    import torch

    return torch.__version__


def machine_info(reference: bool = True) -> dict[str, object]:
    """The machine, as `cagtool gate` compares a baseline's with a run's. `reference`: time the
    reference loop too (reference_loop_s), not done in a process whose job is watched (the API's)."""
    info: dict[str, object] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    if reference:
        info["reference_loop_s"] = reference_loop_s()
    return info


def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), which platform.processor() does not give on
    Linux: two runners of one pool can differ in it and in speed; "" where not known."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith(("model name", "Model")):  # x86 / arm64
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


# The reference loop: about 1.5 ms of the interpreter's integer arithmetic on a 2026 x86 core.
_REFERENCE_ITERATIONS = 30_000
_REFERENCE_TRIES = 15


def reference_loop_s() -> float:
    """The CPU seconds a fixed pure-Python loop takes on this machine now: the fastest of 15
    tries, in this thread's CPU time. Waiting for a CPU is not in it; the CPU's model and clock
    are, and so are a neighbour on the sibling hardware thread and a VM's stolen time, which move
    one reading by up to 1.8x within seconds on a shared 2-core VM: `cagtool run` keeps the fastest
    of a reading before its first mode and one after each (orchestrate.py), the machine's own
    speed. The gate reads the ratio of a run's to its baseline's as the machines' speed
    difference (docs/ci.md)."""
    times = []
    for _ in range(_REFERENCE_TRIES):
        start = time.thread_time()
        total = 0
        for i in range(_REFERENCE_ITERATIONS):
            total += i * i % 7
        times.append(time.thread_time() - start)
    return round(min(times), 7)
