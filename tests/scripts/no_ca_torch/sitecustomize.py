# Simulates a torch build without compiled autograd, for the bad-input test.
import torch._dynamo.compiled_autograd as _ca

del _ca._enable
