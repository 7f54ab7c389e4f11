"""pytorch/tutorials' compiling_optimizer_lr_scheduler recipe, shrunk for the CPU: one backward,
then `opt.step(); sched.step()` compiled together and called 5 times with no backward between
(the tensor learning rate an LR scheduler changes), then the same with a new optimizer and
scheduler (a float rate). Dynamo breaks the graph at step(): the scheduler's wrapper of `opt.step`
is a function it skips, so step() runs eagerly inside the compiled call. `--eager-step-first`: the
first optimizer also steps once eagerly before its compiled calls. Prints the learning rate of each
call and torch's counters as its last line."""

import json
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16, False) for _ in range(3)])
model(torch.rand(16)).sum().backward()

for lr in (torch.tensor(0.01), 0.01):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=5)
    if "--eager-step-first" in sys.argv and not isinstance(lr, float):
        opt.step()

    @torch.compile(backend="eager")
    def fn():
        opt.step()
        sched.step()

    for _ in range(5):
        fn()
        print(f"lr {float(opt.param_groups[0]['lr']):.6f}")
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
