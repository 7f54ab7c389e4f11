"""A data-dependent branch inside a compiled model: the activation depends on the batch's mean, so
Dynamo breaks the graph at the `if` and the backward holds ReluBackward0 on some steps and
TanhBackward0 on others; compiled autograd captures one graph per side and then reuses them.

    python data_branch.py [steps]
"""

import sys

import torch


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if x.mean() > 0:
            h = torch.relu(h)
        else:
            h = torch.tanh(h)
        return self.fc2(h).sum()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    model = torch.compile(Net(), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        x = torch.randn(4, 8) * 0.1 + (1.0 if step % 2 == 0 else -1.0)
        opt.zero_grad()
        model(x).backward()
        opt.step()
    print("done")


if __name__ == "__main__":
    main()
