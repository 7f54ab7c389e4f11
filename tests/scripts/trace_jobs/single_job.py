"""A small training job that knows nothing of cagtool: run it with TORCH_TRACE=DIR set.

Compiled autograd through the config flag (backward inside a compiled step), a shape change
(4 -> 6 rows: a changed-shapes cache miss and a Dynamo recompile), a hook added mid-run (a new
autograd node... a new CA graph), and a function with a graph break compiled twice with a rank
change. Prints torch's own counters as one JSON line on stdout, for the import tests.
Pass `verbose` to turn `compiled_autograd_verbose` on (CA cache-miss reasons in the log)."""

import json
import sys

import torch
from torch._dynamo.utils import counters

if "verbose" in sys.argv[1:]:
    torch._logging.set_logs(compiled_autograd_verbose=True)

torch.manual_seed(0)
torch._dynamo.config.compiled_autograd = True
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


@torch.compile(backend="eager")
def train_step(x):
    loss = model(x).sum()
    loss.backward()
    return loss


for rows in [4, 4, 6, 6]:
    train_step(torch.randn(rows, 8))
model[0].weight.register_hook(lambda grad: grad * 0.5)
train_step(torch.randn(6, 8))
train_step(torch.randn(6, 8))


def with_break(x):
    x = x * 2
    torch._dynamo.graph_break()
    return x + 1


compiled = torch.compile(with_break, backend="eager")
compiled(torch.randn(3))
compiled(torch.randn(3, 3))
print(json.dumps({name: dict(c) for name, c in counters.items()}))
