"""A Lightning classifier as its users write one: a model compiled in the LightningModule
(aot_eager: Inductor is not the point), the loss computed eagerly in training_step, validation_step
on a loader of 30 rows by 16 (16, then 14), and Trainer.fit with the sanity check on (2 batches) over
a training DataLoader of 100 rows by 16: each epoch ends with a batch of 4. The sanity check's 14
rows recompile the forward before step 0 (grad off) and make its batch dimension dynamic; the
training loader's last batch recompiles the backward at step 6, which Lightning calls
(loss.backward() in its own code, outside any compiled function)."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = torch.compile(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 4)), backend="aot_eager")

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.model(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


g = torch.Generator().manual_seed(0)
train = TensorDataset(torch.randn(100, 32, generator=g), torch.randint(0, 4, (100,), generator=g))
val = TensorDataset(torch.randn(30, 32, generator=g), torch.randint(0, 4, (30,), generator=g))
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=2)
trainer.fit(Classifier(), DataLoader(train, batch_size=16, shuffle=True), DataLoader(val, batch_size=16))
