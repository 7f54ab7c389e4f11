"""A Python float that changes every step and scales a 0-dim float32 loss in a compiled module: Dynamo
specialises on its value (`dynamic=False`), so every new value is a guard failure and a recompile,
until `recompile_limit`. Passed as a tensor (`torch.tensor(scale)`) the forward is compiled once.
Arguments: [STEPS (4)] [BACKEND (inductor)]."""

import sys

import torch


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x, scale):
        return self.linear(x).square().mean() * scale


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    backend = sys.argv[2] if len(sys.argv) > 2 else "inductor"  # aot_eager: the same graphs, no C++ to compile
    torch.manual_seed(0)
    model = torch.compile(Scaled(), dynamic=False, backend=backend)
    x = torch.randn(4, 8)
    for step in range(steps):
        scale = 1.0 + 0.5 * step  # a new Python float every step
        loss = model(x, scale).sum()
        loss.backward()
        model.zero_grad()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
