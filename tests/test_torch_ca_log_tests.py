"""The shapes of three of torch's own compiled-autograd tests (tests/scripts/torch_ca_log_tests.py:
test_verbose_logs_graph, test_verbose_logs_aot_id, test_higher_order_gradients) under `cagtool run`'s
ca mode against the same script run inside compiled autograd by hand (the plain job of ca mode).

What differs is known and pinned as such: torch's check_output_and_recompiles calls
torch._dynamo.reset() and then computes its eager reference; inside a hand-made `_enable` that
reset leaves compiled autograd off, while cagtool re-arms it (docs/torch-internals.md,
"`torch._dynamo.reset()` and re-arming"), so the reference run is captured by cagtool's compiler,
the script's own `_enable` then hits that graph (compiles 0, not 1) and the verbose log holds
cagtool's capture, not the script's."""

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
            hand_out, _ = hand.communicate(timeout=900)
        finally:
            hand.kill()
            hand.wait()
        return {"rc": run.returncode, "stdout": run.stdout, "stderr": run.stderr[-3000:], "hand_rc": hand.returncode, "hand": hand_out}

    _, value = recorded_once(tmp_path_factory, "torch-ca-log-tests", record)
    assert value["rc"] == 0 and value["hand_rc"] == 0, value["stderr"]
    return _results(value["hand"]), _results(value["stdout"])


def _log(lines: list[str]) -> list[str]:
    """The log's messages without the record prefix (time, pid) and FX's process-wide numbering."""
    return [re.sub(r"<eval_with_key>\.\d+", "", re.sub(r"^\S+ \S+ \d+ ", "", line)) for line in lines]


def test_higher_order_gradients_as_by_hand(both):
    hand, run = both
    assert run["higher_order_gradients"] == hand["higher_order_gradients"]
    assert hand["higher_order_gradients"]["aot_aot"] == [8.0, None, None, None]  # torch's error, caught by the script


@pytest.mark.xfail(strict=True, reason="cagtool re-arms compiled autograd after torch._dynamo.reset(): the eager reference run is captured")
@pytest.mark.parametrize("test", ["verbose_logs_graph", "verbose_logs_aot_id"])
def test_verbose_logs_as_by_hand(both, test):
    hand, run = both
    assert hand[test]["captures"] == hand[test]["compiles"] == 1
    assert run[test]["compiles"] == hand[test]["compiles"]
    assert _log(run[test]["log"]) == _log(hand[test]["log"])
