"""A language model whose LSTM Dynamo cannot trace (torch 2.13: "Attempted to wrap RNN, GRU, or
LSTM"), compiled whole as pytorch/examples' word_language_model is: Dynamo compiles the forward up
to the LSTM and runs the rest of it eagerly, and counts the break in counters["unimplemented"],
not counters["graph_break"]. Prints torch's counters as its last line.

    python lstm_unresumable.py
"""

import json

import torch
import torch.nn as nn


class LM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.drop = nn.Dropout(0.1)
        self.rnn = nn.LSTM(16, 16)
        self.out = nn.Linear(16, 32)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        emb = self.drop(self.embed(tokens))
        output, _ = self.rnn(emb)
        return self.out(output)


torch.manual_seed(0)
model = LM()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
tokens = torch.randint(0, 32, (6, 4))
for step in range(3):
    loss = compiled(tokens).logsumexp(-1).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({k: {str(a): b for a, b in v.items()} for k, v in counters.items()}))
