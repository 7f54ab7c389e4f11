"""Tutorial: compiling the forward and the backward with different flags (fullgraph=True for the
backward), both ways the tutorial shows. torch 2.13 changes: the context manager is
`compiled_autograd._enable` (`enable` is gone), and tracing `loss.backward()` inside torch.compile
needs `torch._dynamo.config.trace_autograd_ops = True` (else "Unsupported Tensor.backward() call").

    python different_flags.py [flag|context]
"""
import sys
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)


def train_flag(model, x):
    model = torch.compile(model, backend="aot_eager")
    loss = model(x).sum()
    torch._dynamo.config.compiled_autograd = True
    torch._dynamo.config.trace_autograd_ops = True  # torch 2.13: lets fullgraph trace loss.backward()
    torch.compile(lambda: loss.backward(), fullgraph=True, backend="aot_eager")()
    torch._dynamo.config.compiled_autograd = False


def train_context(model, x):
    model = torch.compile(model, backend="aot_eager")
    loss = model(x).sum()
    with torch._dynamo.compiled_autograd._enable(torch.compile(fullgraph=True, backend="aot_eager")):
        loss.backward()


if __name__ == "__main__":
    torch.manual_seed(0)
    model, x = Model(), torch.randn(10)
    variant = sys.argv[1] if len(sys.argv) > 1 else "context"
    for _ in range(3):
        (train_flag if variant == "flag" else train_context)(model, x)
    print("ok", variant)
