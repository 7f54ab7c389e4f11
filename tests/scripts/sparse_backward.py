"""A graph convolution on a sparse adjacency matrix (pytorch/examples' GCN, cut to its layer): the
forward breaks the graph at the sparse op (Dynamo cannot wrap a sparse tensor), and under compiled
autograd the backward's graph fails in Dynamo's compile of it (torch 2.13: IndexError, `inputs[0]`
in the graph's generated code), at the first backward."""

import torch

torch.manual_seed(0)
n = 20
idx = torch.randint(0, n, (2, 60))
adj = torch.sparse_coo_tensor(idx, torch.ones(60), (n, n), check_invariants=True).coalesce()
x = torch.randn(n, 8)
w = torch.nn.Parameter(torch.randn(8, 4))
opt = torch.optim.SGD([w], lr=0.1)


@torch.compile(backend="aot_eager")
def layer(x):
    return torch.sparse.mm(adj, x @ w).relu()


for step in range(3):
    loss = layer(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", loss.item())
