"""Tutorial recompile reason 2: tensors change shape (10, 100, 10); compiled autograd recompiles
once on the change, marks the sizes dynamic, and the third iteration hits the cache."""

import torch


def main() -> None:
    torch._dynamo.config.compiled_autograd = True
    for i in [10, 100, 10]:
        x = torch.randn(i, i, requires_grad=True)
        loss = x.sum()
        torch.compile(lambda: loss.backward(), backend="eager")()


if __name__ == "__main__":
    main()
