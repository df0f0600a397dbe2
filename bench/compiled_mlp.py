"""A small torch.compile'd MLP trained 8 steps on the CPU (argument `eager`: not compiled); bench/README.md, issue 39.

`make_step()` gives one training step of the same job, for bench_compiled.py."""

import sys

import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(128, 256)
        self.l2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = h * torch.sigmoid(h)
        return self.l2(h)


def make_step(compiled: bool = True):
    """One training step of the MLP (compiled with torch.compile's default backend unless `compiled` is False)."""
    torch.manual_seed(0)
    model = MLP()
    if compiled:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step


if __name__ == "__main__":
    train_step = make_step(compiled=sys.argv[1:] != ["eager"])
    for _ in range(8):
        train_step()
