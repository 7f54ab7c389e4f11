"""The shapes of two of torch's own compiled-autograd tests (test/inductor/test_compiled_autograd.py
in pytorch/pytorch: test_torch_function_mode, test_torch_dispatch_mode), plus a training step with
an optimizer run inside the same two modes, as a script: it prints one JSON line with the names
each mode saw, which torch's tests compare with an expected list. A recorder must add none of its
own (a loss read with `item()`, gradient norms): `cagtool run` and `cagtool.capture()` are compared
with the same script run without cagtool.

    python torch_ca_mode_tests.py [--capture DIR]   # --capture: the whole script inside cagtool.capture()
"""

import functools
import json
import sys

import torch
from torch._dynamo import compiled_autograd
from torch.overrides import BaseTorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class LoggingTorchFunctionMode(BaseTorchFunctionMode):
    def __init__(self, called):
        super().__init__()
        self.called = called

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.called.append(str(getattr(func, "__name__", func)))
        return super().__torch_function__(func, types, args, kwargs)


class LoggingTorchDispatchMode(TorchDispatchMode):
    def __init__(self, called):
        super().__init__()
        self.called = called

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.called.append(str(func.__name__))
        return func(*args, **(kwargs or {}))


class MyLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out):
        ctx.save_for_backward(out)
        return out.sum()

    @staticmethod
    def backward(ctx, grad_output):
        (saved,) = ctx.saved_tensors
        return torch.ones_like(saved) * grad_output


def fwd(x, y, z):
    return MyLoss.apply(x * y * z)


def under_mode(mode_class, ca_compiler):
    """torch's test: forward and backward inside the mode, the backward inside compiled autograd."""
    called = []
    x = torch.randn(2, 2, requires_grad=True)
    y = torch.randn(2, 2)
    z = torch.randn(2, 2)
    with mode_class(called):
        called.append("Forward")
        loss = fwd(x, y, z)
        called.append("Backward")
        with compiled_autograd._enable(ca_compiler):
            loss.backward()
    return called


def training_steps(mode_class):
    """A model, its optimizer, three steps inside the mode: forward, backward, step(), zero_grad()."""
    called = []
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(4, 3)
        with mode_class(called):
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return called


def main():
    # The training steps first: a recorder digests the gradients of the job's first step.
    results = {
        "train_function_mode": training_steps(LoggingTorchFunctionMode),
        "train_dispatch_mode": training_steps(LoggingTorchDispatchMode),
        "function_mode": under_mode(LoggingTorchFunctionMode, functools.partial(torch.compile, backend="eager")),
        "dispatch_mode": under_mode(LoggingTorchDispatchMode, lambda gm: gm),
    }
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    if "--capture" in sys.argv:
        import cagtool

        with cagtool.capture(backend="eager", output=sys.argv[sys.argv.index("--capture") + 1]):
            main()
    else:
        main()
