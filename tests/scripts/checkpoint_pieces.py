"""A non-reentrant activation checkpoint of a compiled block, called by a loop over two blocks:
under compiled autograd its unpack hook breaks the CA graph's code at every saved tensor, so one
change of batch size (8 -> 5 at step 2) makes Dynamo recompile every piece of that code. The
block's first call of a step gets the data (no grad), the second the first block's output (grad).
Recorded with `cagtool run --modes ca --backend eager --dynamic` (compiled autograd started
dynamic: no CA recompile gathers the pieces).

    python checkpoint_pieces.py
"""

import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ff = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ff(x)


@torch.compile(backend="eager")
def block_fwd(block: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return block(x)


def main() -> None:
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(Block() for _ in range(2))
    head = torch.nn.Linear(16, 1)
    opt = torch.optim.SGD([*blocks.parameters(), *head.parameters()], lr=0.01)
    for rows in (8, 8, 5):
        x = torch.randn(rows, 16)
        for block in blocks:
            x = checkpoint(block_fwd, block, x, use_reentrant=False)
        loss = head(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
