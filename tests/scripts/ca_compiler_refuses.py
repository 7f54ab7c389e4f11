"""A job's own compiled-autograd compiler that refuses a graph (one holding a sin's backward): the capture of that backward raises the compiler's error, of the compiler's type, as
torch alone raises it. argv[1] says where: `backward` (TypeError, caught, twice: the failed graph
comes back), `grad` (the same through torch.autograd.grad, a ValueError), `thread` (as `backward`,
in a thread of its own), `assert` (an `assert` in the compiler, not caught: the job dies of it).
Prints each error's type, message and the last two frames of its traceback, then trains a model
whose graphs the compiler takes."""

import os
import sys
import threading
import traceback

import torch
from torch._dynamo import compiled_autograd

HOW = sys.argv[1]


def picky_compiler(gm):
    sins = sum(1 for node in gm.graph.nodes if str(node.target).endswith("SinBackward0"))
    if HOW == "assert":
        assert not sins, f"picky_compiler takes no sin ({sins} in this graph)"
    if sins:
        raise (ValueError if HOW == "grad" else TypeError)(f"picky_compiler refuses a graph with {sins} sin")
    return gm


def sin_backward():
    x = torch.randn(3, requires_grad=True)
    if HOW == "grad":
        torch.autograd.grad(x.sin().sum(), x)
    else:
        x.sin().sum().backward()


def twice():
    for _ in range(2):
        try:
            sin_backward()
        except (TypeError, ValueError) as exc:
            frames = traceback.extract_tb(exc.__traceback__)[-2:]
            print(type(exc).__name__, exc, [f"{os.path.basename(f.filename)}:{f.name}" for f in frames])


with compiled_autograd._enable(picky_compiler):
    if HOW == "assert":
        sin_backward()
    elif HOW == "thread":
        worker = threading.Thread(target=twice, name="worker")
        worker.start()
        worker.join()
    else:
        twice()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
print("steps 3")
