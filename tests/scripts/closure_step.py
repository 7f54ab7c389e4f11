"""A training loop whose forward and backward run inside the optimizer's step(), in a closure, as
Lightning's automatic optimization runs them (and as LBFGS needs): zero_grad, forward, backward,
then the update, all within `opt.step(closure)`. The compiled model compiles inside the closure too.

    python closure_step.py [--steps 4]
"""

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    for step in range(args.steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            return loss

        loss = opt.step(closure)
        print(f"step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
