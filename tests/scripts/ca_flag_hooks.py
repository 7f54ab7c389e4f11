"""Sets the compiled-autograd flag itself (`--ca-flag 1`), registers module backward hooks and
uses a custom autograd.Function inside a torch.compile'd model (eager backend). Under
`cagtool run --modes aot` its counts must equal `python ca_flag_hooks.py --ca-flag 0`."""

import argparse

import torch
import torch.nn as nn


class ScaledTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return 2 * y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * 2 * (1 - y * y)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        return self.b(ScaledTanh.apply(self.a(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ca-flag", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch._dynamo.config.compiled_autograd = bool(args.ca_flag)
    torch.manual_seed(0)
    net = Net()
    seen = []
    net.a.register_full_backward_hook(lambda mod, gin, gout: seen.append(1))
    net.b.register_full_backward_pre_hook(lambda mod, gout: None)
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    @torch.compile(backend="eager")
    def train_step(x):
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    for _ in range(args.steps):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()  # backward outside any compiled region
        train_step(torch.randn(4, 8))  # backward inside one
        opt.step()


if __name__ == "__main__":
    main()
