"""A recompile storm from a size that changes every step: the sequence grows by one token per step
and the model is compiled with dynamic=False (static shapes, which turns off Dynamo's automatic
dynamic shapes), so Dynamo recompiles the forward for every new length until it reaches
`recompile_limit` and runs the forward uncompiled from then on. The fix without an edit: the
input dynamic from its first compile (TORCH_COMPILE_DYNAMIC_SOURCES, which torch applies even
under dynamic=False); `cagtool recompiles --explain --verify` proves it.

    python sequence_storm.py [--steps 6]
"""

import argparse

import torch

torch._dynamo.config.recompile_limit = 4  # the default is 8; 4 reaches it in fewer, faster steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(4, 1), backend="eager", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        tokens = torch.randn(8 + step, 4)  # one more token each step
        loss = model(tokens).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
