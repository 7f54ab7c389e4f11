"""A compiled block under activation checkpointing that recompiles in the backward: reentrant
checkpointing (use_reentrant=True) runs the block's forward under no_grad, and re-runs it in the
backward under enable_grad, so Dynamo compiles the block twice: once in the forward, once inside
the checkpoint's recompute (guard: grad mode). `--checkpoint non-reentrant|selective` uses the
other two checkpoints (their recompute runs with grad enabled, as the forward did: no recompile).

    python checkpoint_recompute.py [--steps 3] [--checkpoint reentrant|non-reentrant|selective]
"""

import argparse
import functools

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def save_matmuls(ctx, op, *args, **kwargs):  # selective checkpointing: keep matmuls, recompute the rest
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpoint", choices=("reentrant", "non-reentrant", "selective"), default="reentrant")
    args = parser.parse_args()
    torch.manual_seed(0)
    block = Block(16)
    compiled_block = torch.compile(block, backend="aot_eager")
    head = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD([*block.parameters(), *head.parameters()], lr=0.01)
    options = {"use_reentrant": args.checkpoint == "reentrant"}
    if args.checkpoint == "selective":
        options["context_fn"] = functools.partial(create_selective_checkpoint_contexts, save_matmuls)
    for step in range(args.steps):
        x = torch.randn(8, 16, requires_grad=True)
        hidden = checkpoint(compiled_block, x, **options)
        loss = head(hidden).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
