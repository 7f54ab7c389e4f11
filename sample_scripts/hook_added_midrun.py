"""A gradient hook registered partway through training (say, clipping switched on at step 2):
the new hook changes the autograd graph, so compiled autograd recompiles once at that step."""

import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        if step == 2:
            model.weight.register_hook(lambda grad: grad.clamp(-1.0, 1.0))
        x = torch.randn(4, 8)
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
