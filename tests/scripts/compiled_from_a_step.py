"""Trains 3 steps eagerly, then compiles the model (torch.compile, aot_eager: AOTAutograd's backward
is one CompiledFunctionBackward node) and trains 3 more: the backward's structure changes once, at
step 3, a change of phase (pytorch/tutorials' torch_compile_full_example trains eager, then compiled)."""

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step_model = model
for step in range(6):
    if step == 3:
        step_model = torch.compile(model, backend="aot_eager")
    loss = step_model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("trained 6 steps")
