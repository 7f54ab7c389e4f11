"""A DeepSpeed job on CPU with compiled autograd turned on by DeepSpeed itself:
`engine.compile(compiled_autograd_enabled=True)` over a client `torch.optim.AdamW`, ZeRO stage 0,
1, 2 or 3, gloo. One process, or several started by torchrun or by DeepSpeed's own launcher (each
sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT). DeepSpeed compiles the CA graph with
`torch.compile(backend=<the accelerator's compile backend>)`, not with `engine.compile`'s backend.
Each rank prints its torch counters and the
norm of its model's parameters as one JSON line.

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 python deepspeed_zero.py [--stage 2] [--steps 6] [--backend eager]
        [--ca-backend eager] [--no-ca]
    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 deepspeed_zero.py --stage 1
    DS_ACCELERATOR=cpu python -m deepspeed.launcher.runner --num_gpus 2 deepspeed_zero.py --stage 2

DeepSpeed needs DS_ACCELERATOR=cpu on a machine without an accelerator; its launcher does not set
OMP_NUM_THREADS (torchrun sets 1), and without it step times swing with the machine's load. The
first run JIT-builds a small C++ op (about a minute; cached after, under ~/.cache/torch_extensions).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533")):
    os.environ.setdefault(name, value)  # one process without a launcher

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--stage", type=int, default=2)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--backend", default="eager", help="engine.compile(backend=...)")
parser.add_argument("--ca-backend", default=None,
                    help="the accelerator's compile backend, which DeepSpeed compiles CA graphs with (default: its own, inductor)")
parser.add_argument("--no-ca", action="store_true", help="engine.compile without compiled autograd")
parser.add_argument("--local_rank", type=int, default=None)  # DeepSpeed's launcher passes it
args = parser.parse_args()

deepspeed.init_distributed(dist_backend="gloo")
if args.ca_backend is not None:
    deepspeed.accelerator.get_accelerator().set_compile_backend(args.ca_backend)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
config = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": args.stage},
    "zero_allow_untested_optimizer": True,
}
engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-2), config=config)
engine.compile(backend=args.backend, compiled_autograd_enabled=not args.no_ca)
rank = int(os.environ["RANK"])
generator = torch.Generator().manual_seed(rank)
for _ in range(args.steps):
    x = torch.randn(8, 16, generator=generator)
    loss = engine(x).pow(2).mean()
    engine.backward(loss)
    engine.step()

from torch._dynamo.utils import counters  # noqa: E402

with torch.no_grad():
    # ZeRO-3 holds each rank's shard of a parameter: gather it to read the whole parameter
    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=args.stage == 3):
        norm = float(torch.sqrt(sum(p.double().pow(2).sum() for p in params)))
sys.stdout.write(json.dumps({
    "rank": rank,
    "param_norm": norm,
    "counters": {k: {str(a): b for a, b in v.items()} for k, v in counters.items()},
}) + "\n")
sys.stdout.flush()
