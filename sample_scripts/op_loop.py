"""Tutorial recompile reason 1: the autograd graph's structure changes every iteration
(add, sub, mul, div), so each backward is a cache miss on a new autograd node."""

import torch


def main() -> None:
    torch._dynamo.config.compiled_autograd = True
    x = torch.randn(10, requires_grad=True)
    for op in [torch.add, torch.sub, torch.mul, torch.div]:
        loss = op(x, x).sum()
        torch.compile(lambda: loss.backward(), backend="eager")()


if __name__ == "__main__":
    main()
