"""A compiled model whose forward sets a Python attribute of its config on its first call, when it
is still None (as transformers' sequence-classification models set `config.problem_type` from the
labels): Dynamo compiles the forward with the attribute None, and once more with the value it was
set to. Prints torch's counters last. `--wider-after-first`: the batches after the first have 6 rows,
not 4, so that torch names the size guard of that recompile, not the attribute's."""

import json
import sys

import torch


class Config:
    def __init__(self) -> None:
        self.num_labels = 2
        self.problem_type = None


class Classifier(torch.nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, config.num_labels))

    def forward(self, x, labels):
        logits = self.body(x)
        if self.config.problem_type is None:
            self.config.problem_type = "single_label_classification"
        if self.config.problem_type == "single_label_classification":
            return torch.nn.functional.cross_entropy(logits, labels)
        return torch.nn.functional.mse_loss(logits.squeeze(-1), labels.float())


torch.manual_seed(0)
model = Classifier(Config())
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(4):
    rows = 6 if step and "--wider-after-first" in sys.argv else 4
    opt.zero_grad()
    compiled(torch.randn(rows, 8), torch.randint(0, 2, (rows,))).backward()
    opt.step()
from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
