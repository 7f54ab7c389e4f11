"""What a record says about the software and machine that made it (run.json and every manifest)."""

from __future__ import annotations

import os
import platform
import socket
import sys


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


def machine_info() -> dict[str, object]:
    """The machine, as `cagtool gate` compares a baseline's with a run's."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
