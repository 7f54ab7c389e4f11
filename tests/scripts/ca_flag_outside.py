"""Sets the CA flag where, as written, it turns no compiled autograd on; prints torch's
compiled_autograd counter as its last line.

    python ca_flag_outside.py           # compiles only the model, calls backward outside it
    python ca_flag_outside.py after     # backward inside a compiled step, the flag set after torch.compile(step)
    python ca_flag_outside.py before    # the same with the flag set before torch.compile(step): compiled autograd on
"""
import json
import sys

import torch

how = sys.argv[1] if len(sys.argv) > 1 else "outside"
if how == "outside":
    torch._dynamo.config.compiled_autograd = True
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager")
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
else:
    model = torch.nn.Linear(4, 4)

    def step(x):
        loss = model(x).sum()
        loss.backward()
        return loss

    if how == "before":
        torch._dynamo.config.compiled_autograd = True
    compiled = torch.compile(step, backend="eager")
    if how == "after":
        torch._dynamo.config.compiled_autograd = True
    for _ in range(3):
        compiled(torch.randn(2, 4))

from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps(dict(counters.get("compiled_autograd", {}))))
