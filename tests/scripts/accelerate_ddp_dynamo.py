"""accelerate's own compile on a multi-process CPU job (started by torchrun: MULTI_CPU, DDP over
gloo): Accelerator(dynamo_backend=...).prepare() wraps the model in DDP, then compiles the wrapper,
torch.compile(DDP(model)), which on DDP's C++ reducer compiles no graph (torch 2.13-2.15). `--fixed`
gives prepare() the compiled model instead, without dynamo_backend: accelerate wraps it in DDP and
its forward compiles."""

import sys

import torch
from torch import nn
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

FIXED = "--fixed" in sys.argv
acc = Accelerator(cpu=True) if FIXED else Accelerator(cpu=True, dynamo_backend="eager")
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
dl = DataLoader(TensorDataset(torch.randn(256, 16), torch.randn(256, 4)), batch_size=16)
model, opt, dl = acc.prepare(torch.compile(net, backend="eager") if FIXED else net, opt, dl)
for x, y in dl:
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    acc.backward(loss)
    opt.step()
from torch._dynamo.utils import counters
# one write per line: the ranks share stdout, and print's pieces of two ranks interleaved ("rankrank 1 0graphs")
sys.stdout.write(f"rank {acc.process_index} graphs {counters['stats']['unique_graphs']} gb {sum(counters['graph_break'].values())}\n")
sys.stdout.flush()
