"""Trains a few steps, then lingers at exit (after pardash has recorded the rank's exit 0) until
the file named by its first argument exists: a rank whose teardown outlasts its last word, so
torchrun has not ended though every rank has finished. Lingers 120 s at most."""

import atexit
import os
import sys
import time

import torch

go = sys.argv[1]
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()


def linger() -> None:
    end = time.monotonic() + 120
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.05)


atexit.register(linger)
