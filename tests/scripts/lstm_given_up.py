"""pytorch/examples' mnist_rnn, small: a classifier whose forward reshapes its input and runs an
LSTM first, compiled whole. Dynamo (torch 2.13) gives up on the whole forward at the LSTM
("Attempted to wrap RNN, GRU, or LSTM", then "Skipping the function and falling back to eager"),
so torch.compile compiles nothing; compiled autograd still compiles the backward."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(input_size=7, hidden_size=8, batch_first=True)
        self.fc = nn.Linear(8, 10)

    def forward(self, input):
        input = input.reshape(-1, 7, 7)
        output, _ = self.rnn(input)
        return F.log_softmax(self.fc(output[:, -1, :]), dim=1)


torch.manual_seed(0)
model = torch.compile(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data, target = torch.randn(4, 1, 7, 7), torch.randint(0, 10, (4,))
for step in range(6):
    opt.zero_grad()
    loss = F.nll_loss(model(data), target)
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 4))
