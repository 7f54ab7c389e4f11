"""A gradient clamp switched on at step 2 with a one-line conditional; `step` already exists
before the loop (a resumed run), so moving the whole line above the loop would never register it.

    python conditional_hook.py [steps]
"""

import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0  # resumed from a checkpoint at step 0
    for step in range(step, steps):
        if step == 2: model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))  # noqa: E701
        x = torch.randn(4, 8)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f} weight {model.weight.sum().item():.4f}")


if __name__ == "__main__":
    main()
