"""A DDP job's end under gloo (docs/reliability.md, "A DDP job's end under gloo"): torch 2.13's
~ProcessGroupGloo joins its workers holding the GIL, so cagtool gives the GIL up before a gloo DDP
model or a gloo process group goes. Real torch, one gloo rank, in a fresh process (the group is
global state)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SCRIPT = r'''
import gc, json, socket, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from cagtool.capture.observe import ddp_watch

models = []
ddp_watch.install(models.append)
ddp_watch.install_destroy_guard()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = DDP(nn.Linear(4, 2))
model(torch.randn(3, 4)).sum().backward()
seen = [len(models), ddp_watch.settles]
models.clear()
start = time.perf_counter()
del model
gc.collect()
freed = time.perf_counter() - start
seen.append(ddp_watch.settles)
dist.destroy_process_group()  # `dist.` as a script calls it: the wrapper is what it reaches
seen.append(ddp_watch.settles)
print(json.dumps({"seen": seen, "freed_s": freed, "wrapped": getattr(dist.destroy_process_group, "_cagtool_wrapped", False)}))
'''


@pytest.mark.slow
def test_gloo_ddp_model_and_group_give_the_gil_up_before_they_go() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # The model was seen; nothing settled while it lived; its end settled once, and so did the
    # group's destruction.
    assert result["seen"] == [1, 0, 1, 2]
    assert result["wrapped"] is True
    assert result["freed_s"] >= 0.015  # the GIL was really given up (GLOO_SETTLE_S = 0.02)
