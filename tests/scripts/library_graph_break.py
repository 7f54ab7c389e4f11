"""A trainer-library shape: a decorator around the model's forward, the forward calling a loss
(a property, as libraries pick their loss function) that warns once through the library's logger
(`warning_once`: an lru_cache'd Logger method). Dynamo breaks the graph on the logger call, nested
three calls deep in library code."""

import functools
import logging

import torch


@functools.lru_cache(None)
def warning_once(self, *args, **kwargs):
    self.warning(*args, **kwargs)


logging.Logger.warning_once = warning_once
logger = logging.getLogger("trainer_library")


def can_return_tuple(fn):
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        return_dict = kwargs.pop("return_dict", True)
        out = fn(self, *args, **kwargs)
        return out if return_dict else tuple(out.values())

    return wrapper


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.head = torch.nn.Linear(16, 32)

    @property
    def loss_function(self):
        logger.warning_once("no loss type set: using cross entropy")
        return torch.nn.functional.cross_entropy

    @can_return_tuple
    def forward(self, ids, labels=None):
        logits = self.head(torch.relu(self.embed(ids)))
        loss = self.loss_function(logits.view(-1, 32), labels.view(-1)) if labels is not None else None
        return {"loss": loss, "logits": logits}


torch.manual_seed(0)
model = Model()
compiled = torch.compile(model, backend="eager")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    ids = torch.randint(0, 32, (2, 8))
    compiled(ids, labels=ids)["loss"].backward()
    opt.step()
    opt.zero_grad()
