"""A loop that counts steps, not epochs (as HF Trainer's max_steps does), over a DataLoader whose
last batch is smaller (20 samples by 8: 8, 8, 4, then again): with drop_last=True it trains the
same 6 steps over other batches (8 each), so its losses differ from the run's by design.
`--workers N`: the DataLoader's batches made in N worker processes (forked on Linux, one set each
epoch), which run the script's code as their parent holds it and never import it again.

    python steps_counted_last_batch.py [--workers N]
"""

import argparse
import itertools

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(20, 6), torch.randn(20, 1)), batch_size=8, num_workers=args.workers)
batches = itertools.chain.from_iterable(itertools.repeat(loader))  # epoch after epoch, each a new iterator
for step, (x, y) in zip(range(6), batches):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {float(loss):.4f}")
