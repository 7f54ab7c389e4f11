"""A recompile storm: the forward's loop runs one more time each step, so compiled autograd misses
its cache on every step (a new MulBackward0 node) and Dynamo recompiles the compiled forward for
every new `depth` until it hits `recompile_limit` and falls back to eager."""

import sys

import torch

torch._dynamo.config.recompile_limit = 4  # the default is 8; 4 reaches it in fewer, faster steps


@torch.compile(backend="eager")
def forward(x, depth):
    for _ in range(depth):  # a Python int loop bound: Dynamo specialises on its value
        x = x * 1.01
    return x.sum()


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    x = torch.randn(8, requires_grad=True)
    for step in range(steps):
        loss = forward(x, step + 1)  # one more multiplication each step
        loss.backward()
        x.grad = None
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
