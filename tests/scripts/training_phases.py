"""A job with phases, as long jobs have them: a frozen backbone, a curriculum (longer sequences from
epoch 2), the backbone unfrozen at epoch 3, another loss from epoch 4 (label smoothing), gradient
accumulation from epoch 5; a DataLoader whose last batch is smaller; and an evaluation every epoch
under torch.no_grad(), then a validation loss with grad on and no backward."""

import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=6)
args = p.parse_args()

torch.manual_seed(0)
V, D = 50, 32

class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.l1 = nn.Linear(D, D)
    def forward(self, x):
        return F.gelu(self.l1(self.emb(x)))

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Linear(D, V)
    def forward(self, x):
        h = self.backbone(x)
        return self.head(h)

model = Model()
for prm in model.backbone.parameters():
    prm.requires_grad_(False)          # frozen backbone at start
cmodel = torch.compile(model, backend="aot_eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)

def make_loader(seq):
    X = torch.randint(0, V, (36, seq))
    Y = torch.randint(0, V, (36, seq))
    return DataLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, drop_last=False)

val = make_loader(16)
step = 0
for epoch in range(args.epochs):
    seq = 16 if epoch < 2 else 24                       # curriculum: longer sequences from epoch 2
    if epoch == 3:
        for prm in model.backbone.parameters():         # unfreeze backbone at epoch 3
            prm.requires_grad_(True)
    accum = 2 if epoch >= 5 else 1                      # grad accumulation from epoch 5
    model.train()
    for i, (x, y) in enumerate(make_loader(seq)):
        logits = cmodel(x)
        if epoch >= 4:
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), label_smoothing=0.1)  # loss switch
        else:
            loss = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            opt.step(); opt.zero_grad(); sched.step()
            step += 1
    print(f"epoch {epoch} loss {loss.item():.4f} step {step}", flush=True)
    # eval 1: no_grad
    model.eval()
    with torch.no_grad():
        for x, y in val:
            vl = F.cross_entropy(cmodel(x).reshape(-1, V), y.reshape(-1))
    # eval 2: without no_grad, val loss computed, no backward
    vloss = 0.0
    for x, y in val:
        vloss += F.cross_entropy(cmodel(x).reshape(-1, V), y.reshape(-1)).item()
    print(f"epoch {epoch} val {vl.item():.4f} {vloss:.4f}", flush=True)

from torch._dynamo.utils import counters
print("COUNTERS compiled_autograd", dict(counters["compiled_autograd"]))
print("COUNTERS stats", dict(counters["stats"]))
print("COUNTERS graph_break", dict(counters["graph_break"]))
print("COUNTERS recompiles", dict(counters.get("recompiles", {})))
