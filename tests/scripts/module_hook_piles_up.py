"""A module full backward hook registered on every step and never removed (a user's bug): the
compiled module's frame recompiles on its hooks each step until Dynamo's recompile limit (8) sends
it to eager at step 8; from then the hooks reach compiled autograd's graph, whose code guards the
length of torch's list of them (BackwardHook.user_hooks) and recompiles each step."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
cmodel = torch.compile(model, backend="aot_eager")  # through AOTAutograd, as Inductor
handles = []
for step in range(11):
    x, y = torch.randn(8, 10), torch.randn(8, 1)
    opt.zero_grad()
    handles.append(model[2].register_full_backward_hook(lambda m, gi, go: None))
    loss = ((cmodel(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
