"""A model with a data-dependent Python branch: the activation depends on the batch's mean, so the
autograd graph has ReluBackward0 on some steps and TanhBackward0 on others. Compiled autograd
captures one graph per branch and then reuses them."""

import sys

import torch


class BranchingModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if x.mean() > 0:  # data-dependent branch: a different autograd graph per side
            h = torch.relu(h)
        else:
            h = torch.tanh(h)
        return self.fc2(h).sum()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    model = BranchingModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        sign = 1.0 if step % 2 == 0 else -1.0  # even steps (0, 2, ...) take the relu side, odd steps the tanh side
        x = torch.randn(4, 8) * 0.1 + sign
        opt.zero_grad()
        loss = model(x)
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
