"""Shared fixtures: real runs of the sample scripts (recorded once per session) and torch state resets."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_scripts"


@dataclass
class RecordedRun:
    path: Path  # the run directory
    returncode: int
    stdout: str
    stderr: str


def cagtool_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "cagtool", *args]


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> Path:
    """One Inductor cache dir for the whole session (cold compiles cost ~10 s each)."""
    path = tmp_path_factory.mktemp("inductor-cache")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def record_run(tmp_path_factory, inductor_cache):
    """record_run("op_loop.py", modes="ca", backend="eager") -> RecordedRun, cached per session.

    Runs `cagtool run --modes MODES --backend BACKEND -o DIR [extra...] SCRIPT [args...]` in a
    subprocess, like a user would."""
    cache: dict[tuple, RecordedRun] = {}

    def _run(script: str, *args: str, modes: str = "ca", backend: str = "eager", extra: tuple[str, ...] = ()) -> RecordedRun:
        key = (script, args, modes, backend, extra)
        if key not in cache:
            out = tmp_path_factory.mktemp("run") / Path(script).stem
            env = {**os.environ, "CI": "true", "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache)}
            cmd = cagtool_cmd("run", "--modes", modes, "--backend", backend, "-o", str(out), *extra, str(SAMPLES / script), *args)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(ROOT))
            cache[key] = RecordedRun(out, proc.returncode, proc.stdout, proc.stderr)
        return cache[key]

    return _run


@pytest.fixture(autouse=True)
def reset_torch_state():
    """Tests that drive torch in-process start from a clean Dynamo / compiled-autograd state."""
    yield
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
