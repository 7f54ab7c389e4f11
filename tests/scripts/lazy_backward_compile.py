"""torch.compile around a module, trained a few steps: AOTAutograd compiles the backward at its first
call, apart from the frame's compile (torch's backward CompilationMetrics). Prints torch's own
compilation metrics at the end (METRICS <json>), which the test holds cagtool's figures to."""

import json
import os

import torch
from torch._dynamo.utils import get_compilation_metrics

torch.manual_seed(0)
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)),
                      backend=os.environ.get("LAZY_BACKEND", "aot_eager"))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8)
for _ in range(4):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
print("METRICS " + json.dumps([{"compile_id": str(e.compile_id), "is_forward": e.is_forward,
                                 "entire_frame_compile_time_s": e.entire_frame_compile_time_s,
                                 "backward_cumulative_compile_time_us": e.backward_cumulative_compile_time_us}
                                for e in get_compilation_metrics()]))
