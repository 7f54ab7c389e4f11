"""A library's gradient hook (a module installed under site-packages, as DeepSpeed's ZeRO hooks
are) that reads a Python list of its own, empty at the first backward and filled after it:
compiled autograd traces the hook into the backward, and Dynamo's compile of that graph guards the
list (`not self.pending`). The library is written at run time into a folder named site-packages."""

import os
import sys
import tempfile

import torch
from torch import nn

LIBRARY = '''
class Buckets:
    def __init__(self):
        self.pending = []

    def hook(self, param):
        if not self.pending:
            param.grad.mul_(1.0)
        else:
            param.grad.mul_(0.5)
'''
root = os.path.join(tempfile.mkdtemp(), "site-packages")
os.makedirs(os.path.join(root, "bucketlib"))
with open(os.path.join(root, "bucketlib", "__init__.py"), "w") as f:
    f.write(LIBRARY)
sys.path.insert(0, root)
import bucketlib  # noqa: E402

torch.manual_seed(0)
model = nn.Linear(4, 4)
buckets = bucketlib.Buckets()
for p in model.parameters():
    p.register_post_accumulate_grad_hook(buckets.hook)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(4):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    if step == 0:
        buckets.pending.append(1)
print("trained 4 steps")
