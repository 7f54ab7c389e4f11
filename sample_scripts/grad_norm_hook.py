"""A hook that logs the gradient norm of the logits into a Python list with `.item()`: compiled
autograd compiles the hook with the backward, Dynamo guards on the list's length, and every step
the list is longer, so the hook recompiles every step until `recompile_limit` sends it to eager.

    python grad_norm_hook.py [steps]
"""

import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(8, 4), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    grad_norms: list[float] = []
    for _step in range(steps):
        logits = model(torch.randn(16, 8))
        logits.register_hook(lambda g: grad_norms.append(g.norm().item()))
        loss = logits.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"{len(grad_norms)} gradient norms, last {grad_norms[-1]:.4f}")


if __name__ == "__main__":
    main()
