"""The shapes of three of torch's own compiled-autograd tests (tests/scripts/torch_ca_log_tests.py:
test_verbose_logs_graph, test_verbose_logs_aot_id, test_higher_order_gradients) under `cagtool run`'s
ca mode and inside `cagtool.capture()`, against the same script run inside compiled autograd by
hand (the plain job of ca mode): torch's results, counts and verbose log are the same.

torch's check_output_and_recompiles calls torch._dynamo.reset() and then computes its eager
reference: inside a hand-made `_enable` that reset turns compiled autograd off, and so it does
under cagtool (docs/torch-internals.md, "`torch._dynamo.reset()` inside the ca mode"), which says
so in the record."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT, cagtool_cmd, recorded_once

SCRIPT = str(ROOT / "tests" / "scripts" / "torch_ca_log_tests.py")
BY_HAND = """
import runpy, sys
import torch
from torch._dynamo import compiled_autograd
sys.argv = sys.argv[1:]
with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="eager"), dynamic=False):
    runpy.run_path(sys.argv[0], run_name="__main__")
"""

pytestmark = pytest.mark.slow


def _results(stdout: str) -> dict:
    [line] = [line for line in stdout.splitlines() if line.startswith('{"verbose_logs_graph"')]
    return json.loads(line)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    def record(directory):
        hand = subprocess.Popen([sys.executable, "-c", BY_HAND, SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        try:
            run = subprocess.run(cagtool_cmd("run", "--modes", "ca", "--backend", "eager", "--no-report", "-o", str(directory / "r"), SCRIPT),
                                 capture_output=True, text=True, cwd=ROOT, timeout=900)
            api = subprocess.run([sys.executable, SCRIPT, "--capture", str(directory / "api")], capture_output=True, text=True, cwd=ROOT, timeout=900)
            hand_out, _ = hand.communicate(timeout=900)
        finally:
            hand.kill()
            hand.wait()
        return {"rc": run.returncode, "stdout": run.stdout, "stderr": run.stderr[-3000:], "hand_rc": hand.returncode, "hand": hand_out,
                "api_rc": api.returncode, "api": api.stdout, "api_stderr": api.stderr[-3000:], "dir": str(directory)}

    _, value = recorded_once(tmp_path_factory, "torch-ca-log-tests", record)
    assert value["rc"] == 0 and value["hand_rc"] == 0, value["stderr"]
    assert value["api_rc"] == 0, value["api_stderr"]
    return {"hand": _results(value["hand"]), "run": _results(value["stdout"]), "api": _results(value["api"]), "dir": value["dir"]}


def _log(lines: list[str]) -> list[str]:
    """The log's messages without the record prefix (time, pid) and FX's process-wide numbering."""
    return [re.sub(r"<eval_with_key>\.\d+", "", re.sub(r"^\S+ \S+ \d+ ", "", line)) for line in lines]


@pytest.mark.parametrize("way", ["run", "api"])
def test_higher_order_gradients_as_by_hand(both, way):
    hand = both["hand"]
    assert both[way]["higher_order_gradients"] == hand["higher_order_gradients"]
    assert hand["higher_order_gradients"]["aot_aot"] == [8.0, None, None, None]  # torch's error, caught by the script


@pytest.mark.parametrize("way", ["run", "api"])
@pytest.mark.parametrize("test", ["verbose_logs_graph", "verbose_logs_aot_id"])
def test_verbose_logs_as_by_hand(both, test, way):
    hand, run = both["hand"], both[way]
    assert hand[test]["captures"] == hand[test]["compiles"] == 1
    assert run[test]["compiles"] == hand[test]["compiles"] and run[test]["captures"] == hand[test]["captures"]
    assert _log(run[test]["log"]) == _log(hand[test]["log"])


def test_the_record_says_where_the_reset_turned_compiled_autograd_off(both):
    from pathlib import Path

    import cagtool
    from cagtool.record.schema import FindingEvent

    record = cagtool.load(Path(both["dir"]) / "r").mode("ca")
    [finding] = [f for f in record.of(FindingEvent) if f.code == "ca_turned_off_by_reset"]
    assert finding.source is not None and finding.source.file.endswith("torch_ca_log_tests.py")
