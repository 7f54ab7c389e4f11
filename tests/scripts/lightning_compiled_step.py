"""A Lightning job whose optimizer step is compiled (`torch.compile(opt.step)` in
configure_optimizers, a StepLR stepped every optimizer step): Lightning's automatic optimization
calls `optimizer.step(closure)`, so Dynamo traces the closure, Lightning's hook dispatch
(`_call_strategy_hook`, which logs: a graph break) and the user's training_step. Prints the
trainer's global_step last."""

import argparse

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        opt.step = torch.compile(opt.step, backend="eager")
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    L.seed_everything(0, verbose=False)
    data = TensorDataset(torch.randn(64, 16), torch.randn(64, 4))
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), DataLoader(data, batch_size=8))
    print("global_step", trainer.global_step)


if __name__ == "__main__":
    main()
