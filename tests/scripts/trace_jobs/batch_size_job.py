"""A job whose batch size changes once (32 rows, then 48), nothing else: no branch, no loop of
varying length, no hook. Compiled autograd through the config flag, the step compiled with
`aot_eager` so the forward has an AOT backward graph: the forward's Dynamo recompile for 48 rows
brings a new AOT backward graph, and with it a new compiled-autograd capture.
Run it with TORCH_TRACE=DIR set (or under `cagtool run`)."""

import torch

torch.manual_seed(0)
torch._dynamo.config.compiled_autograd = True
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.compile(backend="aot_eager")
def train_step(x):
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss


for step in range(6):
    x = torch.randn(32 if step < 3 else 48, 64)
    opt.zero_grad()
    train_step(x)
    opt.step()
