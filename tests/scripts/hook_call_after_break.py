"""A trainer's hook dispatcher compiled, as a compiled optimizer step's closure reaches it in
Lightning: `call_hook` logs (a graph break: Dynamo compiles the rest of it as a resume function),
then calls the hook. The resume frame is compiled for the training step's call (a tuple batch)
and once more for the backward hook's (a tensor): a recompile of the resume frame, whose guard
was installed in `training_step`. Prints torch's counters last."""

import json
import logging

import torch

log = logging.getLogger("trainer")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def training_step(batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def backward(loss):
    loss.backward()


@torch.compile(backend="eager")
def call_hook(name, hook, *args):
    log.debug("calling hook %s", name)
    return hook(*args)


for step in range(4):
    batch = (torch.randn(4, 8), torch.randn(4, 1))
    opt.zero_grad()
    loss = call_hook("training_step", training_step, batch)
    call_hook("backward", backward, loss)
    opt.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
