"""A script whose ranks take 4 s to end on SIGTERM (a handler that saves on its way out): a
launch stopping it waits that long, its viewer gone."""

import signal
import sys
import time

import torch


def later(*_):
    time.sleep(4)
    sys.exit(143)


signal.signal(signal.SIGTERM, later)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(100000):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
