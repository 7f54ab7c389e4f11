"""One recorder for every recorded process (cagtool/capture/recorder.py): the mode process of
`cagtool run`, a process the job started (followed), and a Python API block write manifests with
the same fields, so a field added to the recorder reaches all three."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

import cagtool
from cagtool.capture.recorder import CLOSING_OPTIONS
from conftest import ROOT, cagtool_cmd, recorded_once

# The options each entry point sets when it opens its record (record/manifest.py, ModeOptions):
# what it was asked to do, which differs by design. Everything else is written by the recorder.
OPENING = {"waited_to_start_s", "max_steps", "max_time", "trace_nodes", "depyf", "torch_trace", "followed", "python_api",
           "seed", "parity_every", "optimize_ddp", "patched_source"}


def _record(base: Path) -> list:
    proc = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "-o", str(base / "r"),
                                      str(ROOT / "tests" / "scripts" / "trains_and_forks.py")),
                          capture_output=True, text=True, timeout=900, cwd=str(ROOT))
    return [proc.returncode, proc.stderr]


@pytest.fixture(scope="module")
def three_manifests(tmp_path_factory) -> dict[str, dict]:
    base, (returncode, stderr) = recorded_once(tmp_path_factory, "recorder-manifests", _record)
    assert returncode == 0, stderr
    mode_dir = base / "r" / "ca"
    followed = list((mode_dir / "procs").glob("pid*/manifest.json"))
    assert len(followed) == 1, stderr
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    api_dir = tmp_path_factory.mktemp("api") / "run"
    with cagtool.capture(backend="eager", output=api_dir):
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            opt.step()
    return {name: json.loads(path.read_text()) for name, path in
            (("mode process", mode_dir / "manifest.json"), ("followed", followed[0]), ("python api", api_dir / "ca" / "manifest.json"))}


@pytest.mark.slow
def test_three_entry_points_write_the_same_manifest_fields(three_manifests):
    fields = {name: set(m) for name, m in three_manifests.items()}
    assert len({frozenset(f) for f in fields.values()}) == 1, fields
    closing = {name: set(m["options"]) - OPENING for name, m in three_manifests.items()}
    assert len({frozenset(c) for c in closing.values()}) == 1, closing
    assert set(CLOSING_OPTIONS) <= closing["python api"]
    for name, manifest in three_manifests.items():
        options = manifest["options"]
        assert manifest["status"] == "finished" and manifest["exit_code"] == 0, name
        assert options["step_tracking_errors"] == {"count": 0, "last": None}, name
        assert options["structured_log_errors"] == {"count": 0, "last": None}, name
        assert options["losses_not_kept"] == 0 and options["fallback_random"] is False, name
