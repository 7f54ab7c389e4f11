"""What gradient digests (capture/steps/grad_digest.py) cost a training step, in one process, on CPU.

Two figures:
- a digested step: `GradDigests.digest` on the model's gradients (two foreach norms, one
  matrix-vector product per parameter, the stacking), timed against the training step itself
  (forward, backward, AdamW step) of the same model; blocks alternate digest/no-digest (ABBA) so
  drift cancels; the figure is the median over pairs of (step+digest) / step;
- a step that is not due: the optimizer pre-hook's one decrement and comparison, timed alone.

    python benchmarks/grad_digest_cost.py [--model mlp|wide] [--pairs 20] [--block 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from cagtool.capture.steps.grad_digest import GradDigests


def build(model: str) -> tuple[torch.nn.Module, torch.Tensor]:
    if model == "wide":  # ~4.2 M parameters in 8 tensors
        net = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 1))
        return net, torch.randn(64, 1024)
    # The step_overhead.py MLP shape: small tensors, where a per-parameter cost shows most.
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(128, 1)), torch.randn(32, 128)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="mlp", choices=("mlp", "wide"))
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--block", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    net, x = build(args.model)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    params = list(net.parameters())
    digests = GradDigests()

    def block(digest: bool) -> float:
        start = time.perf_counter()
        for step in range(args.block):
            opt.zero_grad()
            net(x).sum().backward()
            if digest:
                digests.digest(step, ["every"], params)
            opt.step()
        seconds = (time.perf_counter() - start) / args.block
        digests._digests.clear()
        return seconds

    for _ in range(3):
        block(True), block(False)
    ratios, on_times, off_times = [], [], []
    for i in range(args.pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        times = {flag: block(flag) for flag in order}
        ratios.append(times[True] / times[False])
        on_times.append(times[True])
        off_times.append(times[False])
    step = statistics.median(off_times)
    extra = statistics.median(on_times) - step
    # The pre-hook's usual path: one decrement and one comparison.
    n = 1_000_000
    start = time.perf_counter()
    for _ in range(n):
        digests.countdown -= 1
        if digests.countdown <= 0:
            pass
    idle = (time.perf_counter() - start) / n
    print(f"model {args.model}: {sum(p.numel() for p in params)} parameters in {len(params)} tensors; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"step {step * 1e3:.3f} ms; a digested step +{extra * 1e6:.0f} us; median ratio {statistics.median(ratios):.4f} "
          f"over {args.pairs} ABBA pairs of {args.block} steps")
    print(f"a step that is not due: {idle * 1e9:.0f} ns (the pre-hook's countdown)")


if __name__ == "__main__":
    main()
