"""MoCo-style contrastive learning: a queue of negatives written at a Python int pointer that the
compiled forward advances (`self.queue_ptr`), cycling through K / batch values. Dynamo specialises
an int attribute of an nn.Module on each value, so each pointer value compiles the forward once.

    python moco_queue.py
"""

import copy, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
class MoCo(nn.Module):
    def __init__(self, dim=16, K=64, m=0.99, T=0.2):
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.q = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, dim))
        self.k = copy.deepcopy(self.q)
        for p in self.k.parameters():
            p.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.queue_ptr = 0
    @torch.no_grad()
    def _momentum(self):
        for pq, pk in zip(self.q.parameters(), self.k.parameters()):
            pk.mul_(self.m).add_(pq.detach(), alpha=1 - self.m)
    @torch.no_grad()
    def _enqueue(self, keys):
        n = keys.shape[0]
        self.queue[:, self.queue_ptr:self.queue_ptr + n] = keys.T
        self.queue_ptr = (self.queue_ptr + n) % self.K
    def forward(self, a, b):
        q = F.normalize(self.q(a), dim=1)
        with torch.no_grad():
            self._momentum()
            k = F.normalize(self.k(b), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ self.queue.clone().detach()
        logits = torch.cat([pos, neg], 1) / self.T
        self._enqueue(k)
        return F.cross_entropy(logits, torch.zeros(a.shape[0], dtype=torch.long))
model = MoCo()
cm = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.q.parameters(), lr=0.03, momentum=0.9)
for step in range(16):
    x = torch.randn(16, 32)
    loss = cm(x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x))
    opt.zero_grad(); loss.backward(); opt.step()
print(f"final loss {loss.item():.4f}")
