"""What the eager mode's torch.compile wrapper costs a call (capture/modes/mode_setup.py
`_compile_keeps_its_wrapper`): with Dynamo off, torch.compile(module) would return the module itself;
the eager mode returns `torch.compiler.disable(module)`, the OptimizedModule the plain job gets, whose
forward runs the module's own inside a DisableContext. In one process under TORCHDYNAMO_DISABLE=1 (as
the eager mode runs), blocks of calls alternate bare module / wrapper (ABBA, so drift cancels), timed
in the thread's CPU time; the figures are medians over pairs: the extra microseconds a call, and the
ratio of a training step (forward, backward, SGD step) with the wrapper to one without.

    python benchmarks/eager_compile_wrapper.py [--pairs 40] [--block 200] [--width 32] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ["TORCHDYNAMO_DISABLE"] = "1"  # before torch is imported: the eager mode's setting

import torch  # noqa: E402


def mlp(width: int) -> torch.nn.Module:
    # the step_overhead.py shape at this width (~1 ms steps at width 32 on this VM)
    layers: list[torch.nn.Module] = []
    for _ in range(6):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def timed(fn, block: int) -> float:
    start = time.thread_time_ns()
    for _ in range(block):
        fn()
    return (time.thread_time_ns() - start) / block / 1e3  # us per call


def abba(bare, wrapped, pairs: int, block: int) -> tuple[list[float], list[float]]:
    timed(bare, block), timed(wrapped, block)  # warm both
    a_times, b_times = [], []
    for i in range(pairs):
        order = (bare, wrapped) if i % 2 == 0 else (wrapped, bare)
        first, second = timed(order[0], block), timed(order[1], block)
        a, b = (first, second) if i % 2 == 0 else (second, first)
        a_times.append(a)
        b_times.append(b)
    return a_times, b_times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--block", type=int, default=200)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    small = torch.nn.Linear(4, 2)
    wrapper = torch.compiler.disable(small)
    assert torch.compile(small) is small and type(wrapper).__name__ == "OptimizedModule"
    x = torch.randn(3, 4)
    with torch.no_grad():
        bare_call, wrapped_call = abba(lambda: small(x), lambda: wrapper(x), args.pairs, args.block * 10)

    model = mlp(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    compiled = torch.compiler.disable(model)
    data = torch.randn(64, args.width)

    def step(m):
        def run():
            opt.zero_grad(set_to_none=True)
            m(data).square().mean().backward()
            opt.step()
        return run

    bare_step, wrapped_step = abba(step(model), step(compiled), args.pairs, args.block)
    extra_call = [w - b for b, w in zip(bare_call, wrapped_call)]
    ratios = [w / b for b, w in zip(bare_step, wrapped_step)]
    result = {
        "torch": torch.__version__, "python": platform.python_version(), "pairs": args.pairs, "block": args.block, "width": args.width,
        "call_us": {"bare_median": statistics.median(bare_call), "wrapper_median": statistics.median(wrapped_call),
                    "extra_median": statistics.median(extra_call), "extra_min": min(extra_call), "extra_max": max(extra_call)},
        "step_us": {"bare_median": statistics.median(bare_step), "wrapper_median": statistics.median(wrapped_step)},
        "step_ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "load": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
