"""Other work than training between training steps, as a job meets it, each variant a job of its
own; torch's counters printed as the last line.

    python work_between_steps.py loop     # 3 epochs of 6 steps, an evaluation after each (model.eval() + no_grad)
    python work_between_steps.py inside   # model.train() / model.eval() called inside compiled functions
    python work_between_steps.py every    # an evaluation (a rollout) before every update
    python work_between_steps.py workers  # 3 epochs of a DataLoader with a worker process (started each epoch)
    python work_between_steps.py inside every   # one after the other, in one process

The evaluation of `loop` is made long (a sleep per batch, as a real validation set is long beside
one training step): the steps after it span it.
"""

import json
import sys
import time

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.1), nn.ReLU(), nn.Linear(32, 1))
cmodel = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randn(8, 1)


def run(variant):
    if variant == "loop":
        for epoch in range(3):
            model.train()
            for i in range(6):
                loss = nn.functional.mse_loss(cmodel(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
            model.eval()
            with torch.no_grad():
                for batch in range(3):
                    cmodel(x)
                    time.sleep(0.02)
    elif variant == "inside":
        @torch.compile(backend="eager")
        def train_step(inputs, targets):
            model.train()
            return nn.functional.mse_loss(model(inputs), targets)

        @torch.compile(backend="eager")
        def evaluate(inputs):
            model.eval()
            out = model(inputs).sum()
            model.train()
            return out

        for i in range(6):
            train_step(x, y).backward()
            opt.step()
            opt.zero_grad()
            if i % 3 == 2:
                with torch.no_grad():
                    evaluate(x)
    elif variant == "workers":
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(48, 16), torch.randn(48, 1)), batch_size=8,
                                             num_workers=1)
        for epoch in range(3):
            for inputs, targets in loader:
                loss = nn.functional.mse_loss(cmodel(inputs), targets)
                loss.backward()
                opt.step()
                opt.zero_grad()
    elif variant == "every":
        for i in range(8):
            model.eval()
            with torch.no_grad():
                cmodel(x)
            model.train()
            loss = nn.functional.mse_loss(cmodel(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()


for variant in sys.argv[1:]:
    run(variant)

from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
