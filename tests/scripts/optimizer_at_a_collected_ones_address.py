"""A compiled optimizer step, then a new optimizer made where the first one was (the first one
collected, the new one at its address: the same `id`), stepped inside a whole compiled training
step. A round: three compiled steps of the first optimizer and one eager step (its hooks run),
then three steps of the second, seven steps; rounds are made until the second optimizer took the
first one's address (at most 4). `python optimizer_at_a_collected_ones_address.py` prints each
round's outcome, then the steps made."""

import gc
import sys

import torch


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


class Filler:
    """An object of an optimizer's size (an instance of a Python class)."""


def one_round() -> bool:
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    step = torch.compile(opt.step, backend="eager")
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        step()
        opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
    del step
    torch._dynamo.reset()
    gc.collect()
    # CPython's allocator gives a freed block again first when its pool was full: objects of the
    # optimizer's size fill the pools that have room, then the optimizer goes and the next object
    # of that size is made. Usually at the same address, not always.
    model = mlp()
    params = list(model.parameters())
    address = id(opt)
    fillers = [Filler() for _ in range(20000)]
    del opt
    opt = torch.optim.AdamW(params)
    del fillers

    @torch.compile(backend="eager")
    def train_step(x: torch.Tensor) -> None:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()

    for _ in range(3):
        train_step(torch.randn(2, 4))
    torch._dynamo.reset()
    return id(opt) == address


torch.manual_seed(0)
rounds = 0
for _ in range(4):
    rounds += 1
    taken = one_round()
    print("round", rounds, "address taken again" if taken else "another address")
    if taken:
        break
print("steps", 7 * rounds)
sys.stdout.flush()
