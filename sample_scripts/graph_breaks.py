"""Tutorial: a forward with two graph breaks. torch.compile alone makes 3 backward graphs;
compiled autograd makes 1."""

import sys

import torch


@torch.compile(backend="aot_eager")
def fn(x):
    temp = x + 10  # 1st graph
    torch._dynamo.graph_break()
    temp = temp + 10  # 2nd graph
    torch._dynamo.graph_break()
    return temp.sum()  # 3rd graph


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    torch.manual_seed(0)
    x = torch.randn(10, 10, requires_grad=True)
    for _ in range(steps):
        loss = fn(x)
        loss.backward()
        with torch.no_grad():
            x -= 0.01 * x.grad
            x.grad = None
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
