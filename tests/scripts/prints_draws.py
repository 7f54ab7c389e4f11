# Prints one JSON line: the first draw from Python's random, numpy and torch, and torch's seed.
import json
import random

import numpy
import torch

print(json.dumps({"random": random.random(), "numpy": float(numpy.random.rand()), "torch": float(torch.rand(())), "initial_seed": torch.initial_seed()}))
