"""Training with an evaluation every 3 steps under torch.no_grad(): Dynamo guards on the grad
mode, so the first evaluation recompiles the forward (`GLOBAL_STATE changed: grad_mode`); the
training and evaluation graphs are then both cached.

    python eval_no_grad.py [steps]
"""

import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    held_out = torch.randn(4, 8)
    for step in range(steps):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 3 == 2:
            with torch.no_grad():
                print(f"step {step}: held-out {model(held_out).pow(2).mean().item():.4f}")


if __name__ == "__main__":
    main()
