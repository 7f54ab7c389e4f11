"""REINFORCE as in pytorch/examples/reinforcement_learning: one loss term per time step of an
episode whose length varies, joined by torch.cat before one backward. The backward graph has one
copy of the policy's nodes per time step: its size follows the episode's length (6, 4, 8 steps).
`--batched`: the fix recompiles --explain gives, the policy run once on the episode's stacked states
(their log-probabilities from one forward): one graph structure whose sizes follow the length."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Policy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.affine1 = nn.Linear(4, 16)
        self.affine2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.affine2(F.relu(self.affine1(x))), dim=1)


torch.manual_seed(0)
policy = Policy()
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
batched = "--batched" in sys.argv[1:]
for length in (6, 4, 8, 6, 4, 8):
    states = torch.randn(length, 1, 4)
    returns = torch.ones(length)
    if batched:
        with torch.no_grad():
            actions = torch.distributions.Categorical(policy(states[:, 0])).sample()
        loss = (-torch.distributions.Categorical(policy(states[:, 0])).log_prob(actions) * returns).sum()
    else:
        log_probs = []
        for t in range(length):
            m = torch.distributions.Categorical(policy(states[t]))
            log_probs.append(m.log_prob(m.sample()))
        policy_loss = [-lp * r for lp, r in zip(log_probs, returns)]
        loss = torch.cat(policy_loss).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")
