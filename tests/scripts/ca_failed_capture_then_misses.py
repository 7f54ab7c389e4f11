"""A compiled-autograd capture that raises, caught by the script, then misses with torch's reasons:
higher-order gradients through an AOT-compiled forward (the capture raises "torch.compile does not
currently support higher order gradients"), twice, so that torch walks the failed graph again; then a
model's backwards, a new graph (a new autograd node) whose batch grows once (changed tensor shapes).
Prints each outcome and the number of training steps it took."""

import torch

f = torch.compile(lambda x: (x.sin() * x).sum(), backend="aot_eager")
x = torch.randn(3, requires_grad=True)
for _ in range(2):
    try:
        torch.autograd.grad(f(x), x, create_graph=True)
        print("ok")
    except RuntimeError as exc:
        print(str(exc).splitlines()[0])

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
for batch in (2, 2, 3, 3):
    model(torch.randn(batch, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    steps += 1
print("steps", steps)
