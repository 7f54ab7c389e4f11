"""Holds each of its compiles open until the test lets it go: a forward frame, the AOT backward
(compiled at the first backward, without compiled autograd), and, under compiled autograd (its
own `_enable`), the CA graph's capture and Dynamo's compile of it. At each, it touches
DIR/<name>.reached and waits for DIR/<name>.go (then removes it), so a test reads the live status
line while that compile is in progress, whatever the machine's speed.

    python compile_waits.py DIR
"""

import os
import sys
import time

import torch
from torch._dynamo import compiled_autograd
from torch._dynamo.backends.common import aot_autograd
from functorch.compile import make_boxed_func

GATE = sys.argv[1]


def wait(name: str) -> None:
    open(os.path.join(GATE, name + ".reached"), "w").close()
    go = os.path.join(GATE, name + ".go")
    while not os.path.exists(go):
        time.sleep(0.02)
    os.remove(go)


def forward_compiler(gm, example_inputs):
    wait("forward")
    return make_boxed_func(gm.forward)


def backward_compiler(gm, example_inputs):
    wait("aot-backward")
    return make_boxed_func(gm.forward)


def ca_graph_backend(gm, example_inputs):
    wait("ca-graph")
    return gm.forward


def ca_compiler(gm):
    wait("ca-capture")  # called inside torch's end_capture
    return torch.compile(gm, backend=ca_graph_backend)


model = torch.compile(torch.nn.Linear(4, 2), backend=aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler))
loss = model(torch.randn(3, 4)).sum()
with compiled_autograd._enable(ca_compiler):  # cagtool's aot mode forces it off
    loss.backward()
print("done")
