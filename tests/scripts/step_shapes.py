"""Training-loop shapes for the step tests: `python step_shapes.py VARIANT [ITERATIONS]`.

gan-dg / gan-gd   two optimizers (generator created first), discriminator stepped first / last
wgan              the discriminator stepped 3 times per generator step (WGAN's n_critic)
layers            one optimizer per layer, every one made first, each layer trained ITERATIONS times
                  in turn (pytorch/examples' forward-forward MNIST); `--compile`: the layer's forward
                  compiled, with a smaller batch at each layer's 6th iteration (a recompile while
                  the steps wait to be told apart) and a layer of another size (one when its turn comes);
                  `--in-function`: the optimizers die when the training function returns
grad-and-backward autograd.grad (a gradient penalty) and backward in one optimizer step
threads           no optimizer; two threads call backward at the same time
nested            reentrant checkpointing (a backward inside the engine's work) and a tensor hook
                  that calls autograd.grad: one top-level backward a step all the same
chdir             os.chdir to a scratch directory, then train (relative record paths must survive)
reset             torch._dynamo.reset() after the first iteration
cuda              a CUDA training loop (skipped by the tests without a GPU)
scaler            torch.amp.GradScaler: iteration 1's gradients made infinite, so the scaler skips
                  that optimizer step (as an fp16 job's first steps often are)
"""

import os
import sys
import tempfile
import threading

import torch

variant = sys.argv[1]
iterations = int(sys.argv[2]) if len(sys.argv) > 2 else 3
torch.manual_seed(0)
device = "cuda" if variant == "cuda" else "cpu"


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(device)


if variant.startswith(("gan", "wgan")):
    # the generator's loss goes through the discriminator, as a GAN's does (its backward another graph)
    gen, disc = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4)), mlp()
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)

    def train_d() -> None:
        opt_d.zero_grad()
        disc(torch.randn(2, 4)).mean().backward()
        opt_d.step()

    def train_g() -> None:
        opt_g.zero_grad()
        disc(gen(torch.randn(2, 4))).mean().backward()
        opt_g.step()

    order = {"gan-dg": [train_d, train_g], "gan-gd": [train_g, train_d], "wgan": [train_d, train_d, train_d, train_g]}[variant]
    for step in range(iterations):
        for train in order:
            train()
        print(f"iteration {step}")

elif variant == "layers":
    def train_layers() -> list[torch.optim.Optimizer]:
        layers = [torch.nn.Linear(8, 4), torch.nn.Linear(4, 4)]
        optimizers = [torch.optim.Adam(layer.parameters(), lr=0.01) for layer in layers]
        forward = torch.compile(lambda layer, x: layer(x).pow(2).mean(), backend="eager") if "--compile" in sys.argv else (
            lambda layer, x: layer(x).pow(2).mean())
        h = torch.randn(8, 8)
        for layer, opt in zip(layers, optimizers):
            for step in range(iterations):
                loss = forward(layer, h[:7] if step == 5 and "--compile" in sys.argv else h)
                opt.zero_grad()
                loss.backward()
                opt.step()
            h = layer(h).detach()
            print(f"layer trained {iterations} times")
        return optimizers

    optimizers = train_layers()
    if "--in-function" in sys.argv:  # the optimizers die with the function, before the record's last count
        del optimizers

elif variant == "grad-and-backward":
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(iterations):
        x = torch.randn(2, 4, requires_grad=True)
        out = model(x).sum()
        (grad_x,) = torch.autograd.grad(out, x, create_graph=True)
        loss = out + grad_x.pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

elif variant == "scaler":
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for step in range(iterations):
        opt.zero_grad()
        scaler.scale(model(torch.randn(2, 4)).mean()).backward()
        if step == 1:
            model[0].weight.grad.fill_(float("inf"))
        scaler.step(opt)
        scaler.update()
        print(f"iteration {step} scale {scaler.get_scale()}")

elif variant == "nested":
    from torch.utils.checkpoint import checkpoint

    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(iterations):
        x = torch.randn(2, 4, requires_grad=True)
        hidden = checkpoint(model, x, use_reentrant=True)  # its backward calls torch.autograd.backward

        def inner_grad(grad: torch.Tensor) -> torch.Tensor:
            y = torch.randn(3, requires_grad=True)
            with torch.enable_grad():  # off while the engine runs hooks
                (g,) = torch.autograd.grad(y.pow(2).sum(), y)  # a backward run inside the outer one
            return grad + 0.0 * g.sum()

        hidden.register_hook(inner_grad)
        opt.zero_grad()
        hidden.sum().backward()
        opt.step()

elif variant == "threads":
    model = mlp()
    barrier = threading.Barrier(2)

    def work() -> None:
        barrier.wait()
        for _ in range(iterations):
            model(torch.randn(2, 4)).sum().backward()

    threads = [threading.Thread(target=work, name=f"worker{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

elif variant in ("chdir", "reset", "cuda"):
    if variant == "chdir":
        scratch = tempfile.TemporaryDirectory(prefix="cagtool-chdir-")  # removed at exit
        os.chdir(scratch.name)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(iterations):
        if variant == "reset" and step == 1:
            torch._dynamo.reset()
        x = torch.randn(3 + step % 2, 4, device=device)  # two shapes: a CA recompile
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
else:
    raise SystemExit(f"unknown variant {variant}")
