"""A frozen middle layer whose parameters are still handed to the optimizer (fine-tuning's
`optimizer(model.parameters())` after `requires_grad_(False)`): they have no gradient in any mode."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
model[2].requires_grad_(False)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="eager")
for step in range(4):
    loss = compiled(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
