"""A DataLoader whose last batch is smaller (100 samples in batches of 32: 32, 32, 32, 4), two
epochs, through a compiled model: Dynamo compiles the forward for 32 rows, recompiles it when the
ragged batch of 4 arrives (a size guard on the input `x`), and compiled autograd captures the
backward again for the new sizes. What `cagtool recompiles --explain --verify` fixes without an
edit: the input dynamic from the start (TORCH_COMPILE_DYNAMIC_SOURCES), CA sizes dynamic.

    python ragged_batches.py [--epochs 2]
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(100, 16), torch.randn(100, 1))
    loader = DataLoader(data, batch_size=32, shuffle=False)
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(args.epochs):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
