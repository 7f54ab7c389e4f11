"""DDP over gloo with one rank per process, as torchrun starts them, where rank 1 of the first
attempt dies after `--die-after` steps (exit 1): with `torchrun --max-restarts 1` the launcher
stops the other rank and starts both again, and the second attempt runs to the end. Compiled
autograd through the config flag (python reducer), so a TORCH_TRACE log of the job holds its
CA graphs. Each rank of each attempt prints one JSON line: rank, attempt, steps, ca_captures.

    torchrun --nproc-per-node 2 --max-restarts 1 ddp_dies_once.py [--steps 4] [--die-after 2] [--shared-keys]

`--shared-keys`: `init_process_group("gloo")` as most jobs call it (env://, torchrun's store with
the same keys in every attempt), the rendezvous whose restart races (benchmarks/torchrun_restart_hang.py).
"""

import argparse
import json
import sys
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--die-after", type=int, default=2)
    parser.add_argument("--shared-keys", action="store_true", help="init_process_group's defaults: no prefix per attempt")
    args = parser.parse_args()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # torchrun's store outlives an attempt, and with it the first attempt's gloo addresses: a
    # restarted rank may read its peer's old one and fail to connect (torch's own race, seen with
    # plain torchrun too). Each attempt's process group keeps its keys under its own prefix.
    if args.shared_keys:
        dist.init_process_group("gloo")
    else:
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
        dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{attempt}/", store), rank=rank, world_size=world)
    torch._dynamo.config.optimize_ddp = "python_reducer"
    torch._dynamo.config.compiled_autograd = True
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.compile(backend="eager")
    def train_step(x):
        loss = model(x).sum()
        loss.backward()
        return loss

    x = torch.randn(4, 8)
    for step in range(args.steps):
        if attempt == 0 and rank == 1 and step == args.die_after:
            sys.stdout.write(json.dumps({"rank": rank, "attempt": attempt, "died_at": step}) + "\n")  # one write: ranks share the pipe, and print writes the newline apart
            sys.stdout.flush()
            os._exit(1)
        train_step(x)
        opt.step()
        opt.zero_grad()
    from torch._dynamo.utils import counters

    sys.stdout.write(json.dumps({"rank": rank, "attempt": attempt, "steps": args.steps, "ca_captures": counters["compiled_autograd"]["captures"]}) + "\n")  # one write: ranks share the pipe, and print writes the newline apart
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
