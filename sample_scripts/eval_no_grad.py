"""Training on a DataLoader whose last batch is smaller (40 samples in batches of 16: 16, 16, 8),
with an evaluation after each epoch under torch.no_grad(), as a language model's training loop
does. Dynamo recompiles the forward twice, for two causes: the smaller batch (a size guard) and
the evaluation (`GLOBAL_STATE changed: grad_mode`); both graphs are then cached. With
--evaluate-first it also evaluates before training (as nanoGPT's loop does at its first step): the
first compile is then the evaluation's, and training's first call is the one that recompiles.
With --autocast it trains under torch.autocast (bfloat16 on the CPU) and evaluates outside it: the
evaluation's recompile then names both (`GLOBAL_STATE changed: grad_mode autocast(cpu)_enabled`).
With --rows 32 --held-out-rows 64 every training batch has 16 rows and the evaluation 64: its one
recompile is the grad mode's, and torch's PGO, seeing the size change across it, suggests a
dynamic source that would not remove it.

    python eval_no_grad.py [--epochs 2] [--evaluate-first] [--autocast] [--rows 40] [--held-out-rows 16]
"""

import argparse
import contextlib

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--evaluate-first", action="store_true")
    parser.add_argument("--autocast", action="store_true")
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--held-out-rows", type=int, default=16)
    args = parser.parse_args()
    training = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.autocast else contextlib.nullcontext
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(args.rows, 8), torch.randn(args.rows, 1)), batch_size=16)
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    held_out = torch.randn(args.held_out_rows, 8)
    if args.evaluate_first:
        with torch.no_grad():
            print(f"before training: held-out {model(held_out).pow(2).mean().item():.4f}")
    for epoch in range(args.epochs):
        for x, y in loader:
            with training():
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            print(f"epoch {epoch}: held-out {model(held_out).pow(2).mean().item():.4f}")


if __name__ == "__main__":
    main()
