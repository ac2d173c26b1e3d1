"""Trains a few steps, then ends with os._exit(0): no exit hook of Python's runs."""

import os

import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
os._exit(0)
