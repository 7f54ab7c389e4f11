"""Tutorial: a tensor backward hook, which AOTAutograd cannot capture and compiled autograd can
(it shows up as a call_hook node in the CA graph)."""

import torch


@torch.compile(backend="aot_eager")
def fn(x):
    return x.sum()


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(10, 10, requires_grad=True)
    x.register_hook(lambda grad: grad + 10)
    for _ in range(3):
        loss = fn(x)
        loss.backward()
    print(f"grad sum {x.grad.sum().item():.1f}")


if __name__ == "__main__":
    main()
