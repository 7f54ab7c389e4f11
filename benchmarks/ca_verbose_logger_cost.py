"""What compiled autograd's verbose logger costs a steady backward (a cache hit), by graph size.

cagtool installs a verbose logger in ca mode so that torch's C++ computes cache-miss reasons at
all (docs/torch-internals.md, "CA cache misses"). With one set, torch's C++ does work for every
autograd node of every backward, also when nothing misses: it builds the node's name (with the
NodeCall index) and copies the node's set of cached keys (`VerboseLogger::log_node_check`). This
measures that cost with torch alone (no cagtool code runs): the same MLP under
`compiled_autograd._enable` (the eager backend unless `--backend`, OMP_NUM_THREADS=1), the logger
set or not before each backward, the order shuffled in every round of two backwards; the figure is
the median of the
per-round differences of the backward's wall time (perf_counter around `loss.backward()`; one
thread, nothing waits), with a distribution-free 95 % interval, and per autograd node.

    python benchmarks/ca_verbose_logger_cost.py                 # depths 2, 10, 40 hidden layers
    python benchmarks/ca_verbose_logger_cost.py --depths 40 --rounds 3000 --json F
    python benchmarks/ca_verbose_logger_cost.py --backend inductor    # the CA graph compiled by Inductor
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from pathlib import Path


def nodes_of(root) -> int:
    """Autograd nodes reachable from `root` (a loss's grad_fn)."""
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(fn for fn, _ in node.next_functions)
    return len(seen)


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """The median and a distribution-free 95 % interval (order statistics of the sign test)."""
    ordered = sorted(values)
    n = len(ordered)
    half = 1.96 * math.sqrt(n) / 2
    low, high = max(0, int(n / 2 - half)), min(n - 1, int(math.ceil(n / 2 + half)))
    return statistics.median(ordered), ordered[low], ordered[high]


def measure(depth: int, width: int, rounds: int, backend: str) -> dict:
    import torch
    from torch._dynamo import compiled_autograd as ca

    torch.manual_seed(0)
    layers: list[torch.nn.Module] = [torch.nn.Linear(256, width), torch.nn.GELU()]
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    messages: list[str] = []
    setter = torch._C._dynamo.compiled_autograd.set_verbose_logger

    def forward():
        opt.zero_grad(set_to_none=False)
        return torch.nn.functional.cross_entropy(model(x), y)

    with ca._enable(lambda gm: torch.compile(gm, backend=backend), dynamic=False):
        for _ in range(20):
            forward().backward()
            opt.step()
        nodes = nodes_of(forward().grad_fn)
        diffs: list[float] = []
        off_times: list[float] = []
        for _ in range(rounds):
            took = {}
            for on in random.sample([True, False], 2):
                setter(messages.append if on else None)
                loss = forward()
                start = time.perf_counter()
                loss.backward()
                took[on] = time.perf_counter() - start
                opt.step()
            diffs.append(took[True] - took[False])
            off_times.append(took[False])
        setter(None)
    mid, low, high = median_interval(diffs)
    return {"backend": backend, "depth": depth, "width": width, "nodes": nodes, "rounds": rounds, "backward_off_s": statistics.median(off_times),
            "cost_s": mid, "ci95_s": [low, high], "per_node_s": mid / nodes, "messages": len(messages)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", default="2,10,40", help="hidden layers of the MLP, comma-separated")
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1500)
    parser.add_argument("--backend", default="eager", choices=("eager", "aot_eager", "inductor"), help="what compiles the CA graph")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    if args.backend == "inductor":
        import tempfile

        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="cagtool-vlog-inductor-"))
    import torch

    torch.set_num_threads(1)
    results = []
    for depth in (int(d) for d in args.depths.split(",")):
        r = measure(depth, args.width, args.rounds, args.backend)
        results.append(r)
        print(f"depth {depth:3d}: {r['nodes']:4d} autograd nodes, backward {r['backward_off_s'] * 1e6:8.1f} us; verbose logger "
              f"+{r['cost_s'] * 1e6:.1f} us [{r['ci95_s'][0] * 1e6:.1f}, {r['ci95_s'][1] * 1e6:.1f}] "
              f"({r['per_node_s'] * 1e9:.0f} ns a node; cache-miss messages: {r['messages']})", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"torch": torch.__version__, "results": results}, indent=1))


if __name__ == "__main__":
    main()
