import sys

import torch

torch.nn.Linear(2, 2)(torch.randn(1, 2)).sum().backward()
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
