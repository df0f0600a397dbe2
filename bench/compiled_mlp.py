"""A small torch.compile'd MLP trained 8 steps on the CPU (argument `eager`: not compiled); bench/README.md, issue 39."""

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


torch.manual_seed(0)
model = MLP()
if sys.argv[1:] != ["eager"]:
    model = torch.compile(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
for _ in range(8):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
