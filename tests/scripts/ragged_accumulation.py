"""Gradient accumulation over batches padded to their longest (HF Trainer's shape with
gradient_accumulation_steps=4 and a padding collator): a compiled embedding-and-linear model, 4
micro-batches a step, lengths 18 then 11 then 19 ... so the forward recompiles for a length at the
step's second micro-batch, whose backward is also the run's first .grad warm-up (the first backward
made .grad, this one adds into it), and the backward's sizes change at the third."""

import torch

torch.manual_seed(0)
LENGTHS = [[18, 11, 19, 17], [12, 19, 15, 18], [16, 14, 19, 13]]


class Tagger(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.embed(ids))).mean(dim=1)


model = Tagger()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for lengths in LENGTHS:
    for length in lengths:
        ids = torch.randint(0, 50, (2, length))
        loss = compiled(ids).pow(2).mean() / len(lengths)
        loss.backward()
    opt.step()
    opt.zero_grad()
