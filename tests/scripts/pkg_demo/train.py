import json
import sys

import torch

torch.nn.Linear(2, 2)(torch.randn(1, 2)).sum().backward()
print(json.dumps({"name": __name__, "argv": sys.argv[1:], "path0": sys.path[0]}))
