"""A Lightning job as its users write one: a LightningModule whose model is compiled
(torch.compile, eager backend: Inductor is not the point), AdamW from configure_optimizers, and a
Trainer with gradient accumulation 2 and max_steps. Lightning's automatic optimization calls
`optimizer.step(closure)`: the forward and backward of each step run inside step(), in the closure.
Prints the trainer's global_step (optimizer steps) last."""

import argparse

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        self.compiled = torch.compile(self.model, backend="eager")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.compiled(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.model.parameters(), lr=1e-2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,)))
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accumulate_grad_batches=2)
    trainer.fit(Net(), DataLoader(data, batch_size=32))
    print("global_step", trainer.global_step)


if __name__ == "__main__":
    main()
