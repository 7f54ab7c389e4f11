"""Tutorial "Basic usage": Linear(10, 10), the CA flag set, backward inside a compiled train step."""

import argparse

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(10, 10)

    def forward(self, x):
        return self.linear(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(10)
    torch._dynamo.config.compiled_autograd = True

    @torch.compile
    def train(model, x):
        loss = model(x).sum()
        loss.backward()
        return loss

    for step in range(args.steps):
        loss = train(model, x)
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
