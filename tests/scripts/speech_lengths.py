"""A speech recogniser's ordinary loop (utterances of varying length, CTC loss), in two shapes.

`--model gru` (default): a bidirectional nn.GRU over utterances of 6, 9, 5 frames, compiled with
torch.compile: Dynamo does not compile the GRU (graph break "Attempted to wrap RNN, GRU, or LSTM"),
so it runs eagerly, and on CPU its autograd graph holds one cell per time step: the backward's
structure follows the utterance's length (and the features' layer before it, compiled, is
recompiled for the length at step 1). The loss is a mean square, to keep that cause alone.
`--model linear`: a linear layer over utterances padded to one length, CTC loss on targets of
varying length: nn.CTCLoss hands torch its length tensors as lists of integers, which its node
(CtcLossBackward0) saves, so each new set of lengths is a new compiled-autograd capture.
`--uncompiled`: the GRU model not compiled (compiled autograd alone): no graph break names the GRU,
its cell's nodes do.
`--ctc-tensor-lengths`: the fix cagtool gives, the overload that keeps the lengths tensors
(torch.ops.aten._ctc_loss.Tensor, node CtcLossBackward1): one recompile for the sizes, then none."""

import sys

import torch
import torch.nn as nn

args = sys.argv[1:]
model_kind = args[args.index("--model") + 1] if "--model" in args else "gru"
tensor_lengths = "--ctc-tensor-lengths" in args
uncompiled = "--uncompiled" in args


class Recogniser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(4, 4)
        self.rnn = nn.GRU(4, 4, batch_first=True, bidirectional=True) if model_kind == "gru" else None
        self.out = nn.Linear(8 if model_kind == "gru" else 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if model_kind == "gru":
            x = torch.relu(self.features(x))
            x, _ = self.rnn(x)
        return self.out(x).log_softmax(-1)


def ctc_loss(log_probs, targets, input_lengths, target_lengths):
    if not tensor_lengths:
        return nn.functional.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)
    nll, _ = torch.ops.aten._ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, 0, True)
    nll = torch.where(torch.isinf(nll), 0, nll)
    return (nll / target_lengths.clamp(min=1)).mean()


torch.manual_seed(0)
model = Recogniser()
compiled = model if uncompiled else torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
target_sets = ([2, 3], [4, 1], [3, 3], [1, 2])
for step, frames in enumerate((6, 9, 5, 9)):
    x = torch.randn(2, frames if model_kind == "gru" else 10, 4)
    log_probs = compiled(x)
    if model_kind == "gru":
        loss = log_probs.pow(2).mean()
    else:
        target_lengths = torch.tensor(target_sets[step])
        targets = torch.randint(1, 5, (int(target_lengths.sum()),))
        loss = ctc_loss(log_probs.transpose(0, 1), targets, torch.full((2,), 10), target_lengths)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
