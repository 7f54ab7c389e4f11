"""A model whose forward sets an attribute on its first call (as HF BERT sets config.problem_type)
while the batch's length changes at the second step: torch names the size guard for the recompile,
and the attribute's guard fails with it, unnamed."""

import torch


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.kind = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind is None:
            self.kind = "set"
        return self.lin(x).relu()


torch.manual_seed(0)
model = Model()
compiled = torch.compile(model, backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    x = torch.randn(6 if step == 0 else 7, 4)
    compiled(x).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
