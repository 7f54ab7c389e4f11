"""Activation checkpointing that saves memory, to measure under each mode: four compiled blocks
of elementwise math on a large activation, each checkpointed (use_reentrant=False), so the
backward recomputes a block's intermediate tensors instead of keeping them all from the forward.
`cagtool checkpointing RUN` re-runs the job with checkpointing turned into a plain call and says
how much peak memory checkpointing saved in aot and in ca.

    python checkpoint_memory.py [--steps 3] [--reentrant] [--rows 2048]
"""

import argparse

import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x * self.scale)
        y = torch.tanh(y) * torch.cos(y)
        return torch.sigmoid(y) + x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--reentrant", action="store_true")
    parser.add_argument("--rows", type=int, default=2048)
    args = parser.parse_args()
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(Block() for _ in range(4))
    compiled = [torch.compile(b, backend="aot_eager") for b in blocks]
    opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
    for step in range(args.steps):
        h = torch.randn(args.rows, 4096, requires_grad=True)  # 32 MiB per activation at 2048 rows
        for block in compiled:
            h = checkpoint(block, h, use_reentrant=args.reentrant)
        loss = h.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
