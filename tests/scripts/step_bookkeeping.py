"""Step shapes whose count must not depend on when the step tracker counts them (test_step_bookkeeping.py):
backward calls before any optimizer exists, accumulation with a recompile mid-step, autograd.grad
beside backward, a GAN whose second optimizer is later collected, an optimizer stepped inside the
backward (post-accumulate-grad hooks), and backward calls after every optimizer is gone."""
import gc
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

def loss_of(batch=4):
    return model(torch.randn(batch, 8)).pow(2).mean()

# 1. backward-only calls before any optimizer exists: each is a step
for _ in range(2):
    loss_of().backward()
# 2. optimizer created: accumulation 3 micro-batches, with a shape change (recompile) mid-step
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(3):
    for micro in range(3):
        loss_of(4 if step != 1 or micro != 2 else 6).backward()
    opt.step()
    opt.zero_grad()
# 3. autograd.grad beside backward in one step
for _ in range(2):
    l = loss_of()
    torch.autograd.grad(l, list(model.parameters()), retain_graph=True)
    l.backward()
    opt.step()
    opt.zero_grad()
# 4. a GAN: a second optimizer, stepped twice per generator step
d = torch.nn.Linear(1, 1)
opt_d = torch.optim.Adam(d.parameters(), lr=0.01)
for _ in range(3):
    for _ in range(2):
        d(loss_of().detach().view(1, 1)).sum().backward()
        opt_d.step()
        opt_d.zero_grad()
    d(loss_of().view(1, 1)).sum().backward()
    opt.step()
    opt.zero_grad()
# 5. the discriminator's optimizer dropped: one optimizer again after it goes
del opt_d
gc.collect()
for _ in range(2):
    loss_of().backward()
    opt.step()
    opt.zero_grad()
# 6. optimizer in backward: a per-parameter optimizer stepped from post-accumulate-grad hooks
opts = {p: torch.optim.SGD([p], lr=0.01) for p in model.parameters()}
def hook(p):
    opts[p].step()
    opts[p].zero_grad()
handles = [p.register_post_accumulate_grad_hook(hook) for p in model.parameters()]
for _ in range(2):
    loss_of().backward()
for h in handles:
    h.remove()
del opts, opt
gc.collect()
# 7. no optimizer alive again: backward calls are steps
for _ in range(2):
    loss_of().backward()
print("done")
