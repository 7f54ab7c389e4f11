"""Three recompiles no line of the model asks for: a library that resets the CPU thread count each
step (torch.set_num_threads), an evaluation pass that switches the module to eval(), and the
evaluation run under torch.no_grad(). Each is global state Dynamo guards on, so each change costs
a recompile of the compiled model; `cagtool recompiles --explain` names each with the line that
changed it.

    python unexpected_causes.py [--steps 5]
"""

import argparse

import torch


def library_setup() -> None:
    """What some data-loading libraries do on every step: pin the intra-op thread count."""
    torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.1), torch.nn.Linear(8, 1))
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        if step == 1:
            library_setup()
        x = torch.randn(4, 8)
        loss = compiled(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 2:
            model.eval()  # an evaluation pass: dropout off
            print(f"eval {compiled(torch.randn(4, 8)).mean().item():.4f}")
            model.train()
        if step == 3:
            with torch.no_grad():  # an evaluation pass without autograd
                print(f"eval {compiled(torch.randn(4, 8)).mean().item():.4f}")
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
