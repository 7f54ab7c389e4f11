"""A 2-rank DDP job over gloo that knows nothing of cagtool: run it with TORCH_TRACE=DIR set
(torch writes one log per rank, dedicated_log_torch_trace_rank_<N>_*.log). Compiled autograd
through the config flag with DDP's python reducer; each rank writes torch's counters as JSON to
OUT_DIR/counters_rank<N>.json (argv[1])."""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank: int, world: int, out_dir: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
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

    for rows in [4, 4, 4 + 2 * rank]:  # rank 1 changes shape on step 3, rank 0 does not
        opt.zero_grad()
        train_step(torch.randn(rows, 8))
        opt.step()
    from torch._dynamo.utils import counters

    with open(os.path.join(out_dir, f"counters_rank{rank}.json"), "w") as f:
        json.dump({name: dict(c) for name, c in counters.items()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    out = sys.argv[1]
    port = sys.argv[2] if len(sys.argv) > 2 else "29531"
    mp.spawn(worker, args=(2, out, port), nprocs=2)
