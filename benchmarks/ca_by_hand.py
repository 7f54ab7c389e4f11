"""Runs a script with compiled autograd on and no cagtool: the baseline for the overhead benchmark.

    python benchmarks/ca_by_hand.py BACKEND SCRIPT [ARGS...]
"""

import runpy
import sys

import torch
from torch._dynamo import compiled_autograd


def main() -> None:
    backend, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    with compiled_autograd._enable(lambda gm: torch.compile(gm, backend=backend), dynamic=False):
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
