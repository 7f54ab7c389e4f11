"""A backward-only job shaped like pytorch/examples' word_language_model: a small LSTM language
model trained by hand (no optimizer: `p.add_(p.grad, alpha=-lr)` after clip_grad_norm_) at a high
learning rate, so that training is chaotic, on random tokens. Seeded. At its end the script rebinds
`model` to a fresh copy and frees the trained one, as word_language_model reloads its best model.

`--kind`:
- plain: nothing else. Under compiled autograd with Inductor (`cagtool run --backend inductor`) the
  backward's reductions are reordered: the losses equal eager's to ~1e-7 for the first tens of
  steps, then the round-off, amplified by the chaotic training, moves them apart (lr 35: beyond
  1e-5 from step 44, beyond 1e-3 from step 95; torch 2.13, CPU). The eager and aot_eager backends
  compute the same bits as eager mode: no drift.
- drift: the same drift without Inductor's compile (~35 s of CPU here): a hook on
  `rnn.weight_hh_l0` rounds its gradient once more where Dynamo traces it, `(g * 3) / 3`, at most an
  ulp per element, as a reordered sum does; traced into the CA graph (ca mode), run eagerly it
  changes nothing (eager mode). Beyond 1e-5 from step 42, beyond 1e-3 from step 95.
- wrong_hook: a hook on `head.weight` scales its gradient by 1.5 where Dynamo traces it: the ca
  mode's gradient is wrong from step 0.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.encoder(tokens))
        return self.head(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", default="drift", choices=["plain", "drift", "wrong_hook"])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=35.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    vocab, hidden = 50, 32
    model = Model(vocab, hidden)
    if args.kind == "drift":
        model.rnn.weight_hh_l0.register_hook(lambda grad: (grad * 3) / 3 if torch.compiler.is_compiling() else grad)
    if args.kind == "wrong_hook":
        model.head.weight.register_hook(lambda grad: grad * 1.5 if torch.compiler.is_compiling() else grad)
    data = torch.randint(0, vocab, (args.steps + 1, 8, 4))
    for step in range(args.steps):
        logits = model(data[step])
        loss = F.cross_entropy(logits.view(-1, vocab), data[step + 1].view(-1))
        model.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-args.lr)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    model = Model(vocab, hidden)  # the trained model is gone: only its parameters' gradients remain digested
    print(f"done, {sum(p.numel() for p in model.parameters())} parameters")


if __name__ == "__main__":
    main()
