"""Higher-order gradients through an AOT-compiled forward: under compiled autograd each capture
raises ("torch.compile does not currently support higher order gradients"); the script catches it
and tries again, as torch's own compiled-autograd tests do. Prints the outcomes."""

import torch

f = torch.compile(lambda x: (x.sin() * x).sum(), backend="aot_eager")
x = torch.randn(3, requires_grad=True)
for _ in range(3):
    try:
        torch.autograd.grad(f(x), x, create_graph=True)
        print("ok")
    except RuntimeError as exc:
        print(str(exc).splitlines()[0])
