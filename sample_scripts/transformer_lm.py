"""A small realistic transformer language model, trained with AdamW on random tokens.

The common case: the model is torch.compile'd and loss.backward() runs outside it, so the
compiled-autograd config flag alone would do nothing; cagtool turns compiled autograd on.
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        attn, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        x = x + attn
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, context: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((context, context), float("-inf")), diagonal=1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.embed(tokens) + self.pos[:t]
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=32)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend for the model")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = TinyLM(args.vocab, args.dim, heads=4, layers=args.layers, context=args.context)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    compiled = torch.compile(model, backend=args.backend)
    data = torch.randint(0, args.vocab, (args.steps, args.batch, args.context + 1))

    for step in range(args.steps):
        tokens, targets = data[step, :, :-1], data[step, :, 1:]
        logits = compiled(tokens)
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 8 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}  ppl {math.exp(loss.item()):.1f}")


if __name__ == "__main__":
    main()
