"""A wrapper module whose forward calls a compiled submodule, as a LightningModule's does
(`self.net = torch.compile(net)`, `forward` returns `self.net(x)`): training and the evaluation
under torch.no_grad() both call the wrapper, so both reach the compiled code from the one line
in forward. The evaluation comes first (Lightning's sanity check), then training: Dynamo
recompiles the submodule's forward on the grad mode. The evaluation's own call is higher up
(`evaluate`), not the compiled call's line.

    python shared_forward_eval.py
"""

import torch
import torch.nn as nn


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.compile(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)), backend="eager")

    def forward(self, x):
        # training and the evaluation both call the compiled module here
        return self.net(x)


torch.manual_seed(0)
model = Wrapper()
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def evaluate():
    with torch.no_grad():
        return model(torch.randn(8, 16)).pow(2).mean().item()


evaluate()  # before training, as Lightning's sanity check
for step in range(6):
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
evaluate()
