"""A fixed-shape MLP trained with AdamW under torch.compile: the job a CI timing gate watches.

Every step has the same shapes, so nothing recompiles after the first step and the step time is
the only thing that changes between runs. `--slow-ms N` adds N milliseconds of waiting to every
step, a stand-in for a pull request that made the step slower, to see a gate catch it (`--stall-ms N`
adds them to every 4th step only: the mean slower, the median step not):

    cagtool run --modes ca --backend eager --repeat 5 sample_scripts/mlp_steps.py
    cagtool baseline save -o cagtool-baseline.json
    cagtool run --modes ca --backend eager sample_scripts/mlp_steps.py --slow-ms 10
    cagtool gate --baseline cagtool-baseline.json --max-regression 25%
"""

import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--slow-ms", type=float, default=0.0, help="wait this long in every step (a slowed copy of the job)")
parser.add_argument("--stall-ms", type=float, default=0.0, help="wait this long in every --stall-every'th step (data that is late now and then)")
parser.add_argument("--stall-every", type=int, default=4)
parser.add_argument("--backend", default="aot_eager", help="the script's own torch.compile backend")
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
compiled = torch.compile(model, backend=args.backend)
inputs, targets = torch.randn(64, 256), torch.randint(0, 10, (64,))

for step in range(args.steps):
    loss = torch.nn.functional.cross_entropy(compiled(inputs), targets)
    loss.backward()
    if args.slow_ms:
        time.sleep(args.slow_ms / 1000.0)
    if args.stall_ms and step % args.stall_every == args.stall_every - 1:
        time.sleep(args.stall_ms / 1000.0)
    optimizer.step()
    optimizer.zero_grad()
print(f"final loss {loss.item():.4f}")
