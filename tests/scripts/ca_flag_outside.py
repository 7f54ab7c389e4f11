"""Sets the CA flag, compiles only the model, calls backward outside: as written, no compiled autograd."""
import torch

torch._dynamo.config.compiled_autograd = True
model = torch.compile(torch.nn.Linear(4, 4), backend="eager")
for _ in range(3):
    model(torch.randn(2, 4)).sum().backward()
