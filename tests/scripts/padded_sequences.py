"""A text classifier whose collate function pads each batch to its longest sentence: the length
(dim 1 of `tokens` and `mask`) changes per batch. Dynamo recompiles once and then compiles the
length dynamic; `h * mask` ties the two inputs' lengths."""

import torch
import torch.nn as nn

torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self, vocab=100, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, 2)

    def forward(self, tokens, mask):
        h = torch.tanh(self.proj(self.emb(tokens)))
        h = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        return self.out(h)


def collate(sentences):
    longest = max(len(s) for s in sentences)
    tokens = torch.zeros(len(sentences), longest, dtype=torch.long)
    for i, s in enumerate(sentences):
        tokens[i, : len(s)] = torch.tensor(s)
    return tokens, (tokens != 0).float()


model = Classifier()
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, longest in enumerate([7, 12, 9, 15, 5]):
    sentences = [torch.randint(1, 100, (longest - i,)).tolist() for i in range(4)]
    tokens, mask = collate(sentences)
    loss = nn.functional.cross_entropy(compiled(tokens, mask), torch.randint(0, 2, (4,)))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
