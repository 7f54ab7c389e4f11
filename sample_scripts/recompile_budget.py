"""A job that spends its recompile budget a little each step: the compiled loss takes the step's
learning-rate warm-up factor as a Python float, and a float that changes is a new constant to
Dynamo under dynamic=False, so the loss recompiles every step. With the default recompile_limit
(8), it would reach the limit at step 8: `cagtool recompiles --explain` forecasts it from the
first steps, and says the job never reached a steady state.

    python recompile_budget.py [--steps 5]
"""

import argparse

import torch


@torch.compile(backend="eager", dynamic=False)
def scaled_loss(out: torch.Tensor, target: torch.Tensor, warmup: float) -> torch.Tensor:
    return (out - target).pow(2).mean() * warmup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x, target = torch.randn(4, 8), torch.randn(4, 1)
        loss = scaled_loss(model(x), target, min(1.0, (step + 1) / 100))
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
