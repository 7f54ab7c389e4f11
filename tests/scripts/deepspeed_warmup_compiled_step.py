"""A DeepSpeed job on CPU, one process, ZeRO stage 1, whose client optimizer's step is compiled
(`torch.compile(opt.step)`) and whose learning rate DeepSpeed's WarmupLR sets every step from
`warmup_min_lr: 0` (an int, as configs write it). `--tensor-lr` gives the optimizer a tensor rate.
Prints the engine's global steps last."""

import argparse
import os

for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29541")):
    os.environ.setdefault(name, value)

import deepspeed  # noqa: E402
import torch  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--tensor-lr", action="store_true")
args = parser.parse_args()
deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-2) if args.tensor_lr else 1e-2)
opt.step = torch.compile(opt.step, backend="eager")
config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1},
          "zero_allow_untested_optimizer": True, "steps_per_print": 1000,
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-2, "warmup_num_steps": 3}}}
engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
g = torch.Generator().manual_seed(1)
for _ in range(args.steps):
    loss = engine(torch.randn(8, 16, generator=g)).pow(2).mean()
    engine.backward(loss)
    engine.step()
print("global_steps", engine.global_steps)
