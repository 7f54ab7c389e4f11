"""pytorch/examples' word_language_model, its shape: no DataLoader. The token stream is batchified
into columns (trimmed to a multiple of the batch size) and cut by `get_batch` into bptt-long
chunks, the last of each epoch shorter (24 rows by 7: 7, 7, 7, then 2). Dynamo compiles the forward
for 7 rows and recompiles it for the last chunk's 2; compiled autograd captures its backward again.
No drop_last answers it: the script makes the slice itself.

    python hand_sliced_chunks.py [--epochs 2]
"""

import argparse

import torch
import torch.nn as nn

NTOKENS, EMSIZE, BSZ, BPTT = 50, 16, 4, 7


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


class TokenModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Embedding(NTOKENS, EMSIZE)
        self.hidden = nn.Linear(EMSIZE, EMSIZE)
        self.decoder = nn.Linear(EMSIZE, NTOKENS)

    def forward(self, src: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # As word_language_model's RNNModel: called with the batch and a state, positionally.
        h = torch.tanh(self.hidden(self.encoder(src)) + state)
        return self.decoder(h), h.mean(0).detach()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    train_data = batchify(torch.randint(0, NTOKENS, (24 * BSZ + 3,)), BSZ)  # 24 rows: the +3 trimmed
    model = torch.compile(TokenModel(), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    for _epoch in range(args.epochs):
        state = torch.zeros(BSZ, EMSIZE)
        for i in range(0, train_data.size(0) - 1, BPTT):
            data, targets = get_batch(train_data, i)
            opt.zero_grad()
            output, state = model(data, state)
            loss = criterion(output.view(-1, NTOKENS), targets)
            loss.backward()
            opt.step()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
