"""`model.compile()` on a model of torch's own modules (nn.Sequential), as the torch.compile
tutorials now write it, beside a module of the script's own compiled the same way and a compiled
loss function. On torch 2.13 Dynamo skips the Sequential's call under Module.compile() and compiles
nothing for it (pytorch/pytorch#150915); the script's own module and the loss compile.
`--fixed` compiles the Sequential as torch.compile(model, ...) instead.

    python module_compile_builtin.py [--fixed] [--steps 4]
"""

import argparse

import torch
import torch.nn as nn


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).tanh()


@torch.compile(backend="eager")
def loss_fn(y: torch.Tensor) -> torch.Tensor:
    return y.pow(2).mean()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 8), nn.ReLU())
    if args.fixed:
        model = torch.compile(model, backend="eager")
    else:
        model.compile(backend="eager")
    head = Head()
    head.compile(backend="eager")
    opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01)
    for _ in range(args.steps):
        loss = loss_fn(head(model(torch.randn(4, 16))))
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
