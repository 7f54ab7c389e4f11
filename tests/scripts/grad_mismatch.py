"""Gradients that differ between modes because the script behaves differently under compile
(`torch.compiler.is_compiling()`), for the gradient-parity tests. Seeded; SGD; `--kind`:

- scale_hook: a tensor hook on `head.weight` doubles the gradient when Dynamo traces it: under
  compiled autograd the hook is traced into the CA graph (ca mode), in eager and aot it runs
  eagerly. The ca mode's head.weight gradient is scaled by 2 from step 0.
- zero_hook: the same hook zeroes the gradient (a hook that "did not run" its work in one mode).
- scale_and_zero: scale_hook on `head.weight` and, on `head.bias`, a hook that zeroes its gradient
  under compile: both kinds of mismatch in one recording (one job, two parameters named at step 0).
- swap: `left` and `right` start with equal weights and see inputs x and y; compiled, the forward
  feeds them the other way round, so the loss is the same and the two gradients are swapped: the
  global gradient norm is the same in every mode.
- sign_hook: the hook negates head.bias's gradient under compile: same norms, flipped sign.
- late_scale_hook: scale_hook's doubling, registered at step 30 (run it with `--steps 40`): the
  modes agree bit for bit until then, and the ca mode's losses jump apart at step 31.
- agree: none of these (the modes agree).
"""

import argparse

import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.left = torch.nn.Linear(8, 8)
        self.right = torch.nn.Linear(8, 8)
        with torch.no_grad():
            self.right.weight.copy_(self.left.weight)
            self.right.bias.copy_(self.left.bias)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x, y):
        if self.kind == "swap" and torch.compiler.is_compiling():
            a, b = self.left(y), self.right(x)
        else:
            a, b = self.left(x), self.right(y)
        return self.head(torch.tanh(a) + torch.tanh(b))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", default="agree")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Net(args.kind)

    def hook(grad):
        if torch.compiler.is_compiling():
            if args.kind in ("scale_hook", "scale_and_zero"):
                return grad * 2
            if args.kind == "zero_hook":
                return grad * 0
        return grad

    def sign(grad):
        return -grad if torch.compiler.is_compiling() else grad

    def zero(grad):
        return grad * 0 if torch.compiler.is_compiling() else grad

    model.head.weight.register_hook(hook)
    if args.kind == "sign_hook":
        model.head.bias.register_hook(sign)
    if args.kind == "scale_and_zero":
        model.head.bias.register_hook(zero)
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    target = torch.randn(16, 1)
    for step in range(args.steps):
        if args.kind == "late_scale_hook" and step == 30:
            model.head.weight.register_hook(lambda grad: grad * 2 if torch.compiler.is_compiling() else grad)
        opt.zero_grad()
        loss = F.mse_loss(compiled(x, y), target)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
