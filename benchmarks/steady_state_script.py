"""The benchmark's workload: an MLP trained with AdamW for many steps; prints its steady-state
step time (median of the steps after warm-up), measured inside the script so that both the bare
and the cagtool run are timed the same way."""

import json
import statistics
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
times = []
for step in range(steps):
    start = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - start)
steady = times[steps // 5 :]
print(json.dumps({"median_step_s": statistics.median(steady)}))
