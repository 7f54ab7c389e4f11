"""pytorch/examples' mnist in small: a conv net compiled, trained on batches of 32 then a last one of
24 (dim 0 made dynamic: 0/1), evaluated under no_grad every epoch on batches of 32 and a last of 8.
The evaluation compiles for grad off (0/2, dim 0 dynamic), and its last batch of 8 fails that graph's
`16 <= x.size()[0]` (0/3): torch 2.13's convolution picks its path by the batch size, and Dynamo
guards the range. Both between training steps."""

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


torch.manual_seed(0)
model = torch.compile(Net(), backend="eager")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
train = [(torch.randn(n, 1, 12, 12), torch.randint(0, 10, (n,))) for n in (32, 32, 24)]
test = [(torch.randn(n, 1, 12, 12), torch.randint(0, 10, (n,))) for n in (32, 8)]
for epoch in range(2):
    model.train()
    for data, target in train:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(data).argmax(1) == target).sum()) for data, target in test)
    print(f"epoch {epoch}: {correct} correct")
