"""Optimizer steps as torch.compile meets them, for the tests that compare torch's counters with
plain python's: `python compiled_optimizer_shapes.py [VARIANT ...]` (all of them by default), each
three iterations of one optimizer step (a GAN's two optimizers: one step), then a line with its
torch counters and the reasons of its recompiles (object ids and addresses blanked), then torch._dynamo.reset()
and a collection (the variant's optimizers gone).

one         torch.compile(opt.step), Adam
two         a GAN's two Adam optimizers, each step compiled (the second recompiles on `self`)
fullgraph   opt.step() in a fullgraph=True compiled function: _use_grad's graph break raises, the
            script steps eagerly instead
whole       a whole training step compiled: forward, loss.backward() and opt.step() inside
eager       a compiled model, two optimizers stepped eagerly
scaler      a whole compiled training step through torch.amp.GradScaler (scale, step, update),
            iteration 1's gradients made infinite: the scaler skips that optimizer step
limit       two compiled optimizer steps under recompile_limit=1: the second runs eagerly inside
            its compiled call
disabled    a whole compiled training step whose optimizer step is in a torch.compiler.disable'd
            function: it runs eagerly inside the compiled call
"""

import gc
import json
import re
import sys

import torch
from torch._dynamo.utils import _compilation_metrics, counters

VARIANTS = ["one", "two", "fullgraph", "whole", "eager", "scaler", "limit", "disabled"]


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def run(variant: str) -> None:
    torch.manual_seed(0)
    model = mlp()
    if variant == "one":
        opt = torch.optim.Adam(model.parameters())
        step = torch.compile(opt.step, backend="eager")
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            step()
            opt.zero_grad()
    elif variant in ("two", "limit"):
        other = mlp()
        o1, o2 = torch.optim.Adam(model.parameters()), torch.optim.Adam(other.parameters())
        s1, s2 = torch.compile(o1.step, backend="eager"), torch.compile(o2.step, backend="eager")
        with torch._dynamo.config.patch(recompile_limit=1 if variant == "limit" else 8):
            for _ in range(3):
                other(model(torch.randn(2, 4)).expand(2, 4)).sum().backward()
                s2()
                s1()
                o1.zero_grad()
                o2.zero_grad()
    elif variant == "fullgraph":
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        @torch.compile(backend="eager", fullgraph=True)
        def step() -> None:
            opt.step()

        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - what torch raises is part of the output compared
                print(type(exc).__name__, str(exc).splitlines()[0])
                opt.step()
            opt.zero_grad()
    elif variant in ("whole", "scaler"):
        opt = torch.optim.AdamW(model.parameters())
        scaler = torch.amp.GradScaler("cpu")

        @torch.compile(backend="eager")
        def train_step(x: torch.Tensor, poison: bool) -> None:
            if variant == "scaler":
                scaler.scale(model(x).mean()).backward()
                if poison:
                    model[0].weight.grad.fill_(float("inf"))
                scaler.step(opt)
                scaler.update()
            else:
                model(x).sum().backward()
                opt.step()
            opt.zero_grad()

        for i in range(3):
            train_step(torch.randn(2, 4), i == 1)
    elif variant == "disabled":
        opt = torch.optim.AdamW(model.parameters())

        @torch.compiler.disable
        def step() -> None:
            opt.step()
            opt.zero_grad()

        @torch.compile(backend="eager")
        def train_step(x: torch.Tensor) -> None:
            model(x).sum().backward()
            step()

        for _ in range(3):
            train_step(torch.randn(2, 4))
    elif variant == "eager":
        compiled = torch.compile(model, backend="eager")
        o1, o2 = torch.optim.Adam(model[0].parameters()), torch.optim.SGD(model[2].parameters(), lr=0.1)
        for _ in range(3):
            compiled(torch.randn(2, 4)).sum().backward()
            o1.step()
            o2.step()
            o1.zero_grad()
            o2.zero_grad()
    seen = {k: {str(a): b for a, b in v.items()} for k, v in counters.items()}
    seen["recompile_reasons"] = [str(m.recompile_reason) for m in _compilation_metrics if m.recompile_reason]
    # object ids and addresses differ between two runs of the script
    seen_text = re.sub(r"\d{6,}", "ID", re.sub(r"0x[0-9a-f]+", "0x", json.dumps(seen, sort_keys=True)))
    print(variant, seen_text, "weights", round(sum(p.sum().item() for p in model.parameters()), 4))
    counters.clear()
    _compilation_metrics.clear()
    torch._dynamo.reset()
    gc.collect()  # this variant's optimizers: a step ends once every live optimizer has stepped


for name in sys.argv[1:] or VARIANTS:
    run(name)
