"""Fine-tuning: the backbone starts frozen and is unfrozen at step 3. Dynamo guards on each
parameter's requires_grad, so the forward recompiles once (`requires_grad mismatch`), and the
backward of the new forward (new AccumulateGrad nodes for the backbone) is a new graph for
compiled autograd.

    python unfreeze_backbone.py [steps]
"""

import sys

import torch


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    torch.manual_seed(0)
    backbone = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    head = torch.nn.Linear(16, 1)
    model = torch.compile(torch.nn.Sequential(backbone, head), backend="eager")
    backbone.requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        if step == 3:
            backbone.requires_grad_(True)  # unfreeze
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
