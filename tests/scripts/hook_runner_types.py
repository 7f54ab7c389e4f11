"""Two kinds of hook with a graph break each: compiled autograd's graph calls them through torch's
call_hook, which Dynamo compiles once per kind of argument (a gradient, then the parameter itself)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
seen = []


def on_grad(g):
    torch._dynamo.graph_break()  # as a library hook that Dynamo cannot trace whole
    return g


def after_accumulate(p):
    torch._dynamo.graph_break()


model[0].weight.register_hook(on_grad)
model[2].weight.register_post_accumulate_grad_hook(after_accumulate)
cmodel = torch.compile(model, backend="eager")
for step in range(3):
    loss = cmodel(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
