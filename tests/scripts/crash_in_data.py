"""Trains from a DataLoader whose dataset raises at its 12th sample (a missing file, a bad
record): the error passes through pardash's wrapper of the loader's ``__next__``."""

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 11:
            raise FileNotFoundError("record 11 is missing")
        return torch.randn(8), torch.randn(2)


def train(model, opt, loader):
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()


model = nn.Linear(8, 2)
train(model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Records(), batch_size=4))
