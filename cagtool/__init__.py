"""cagtool: profiling and diagnosis for PyTorch compiled autograd."""

__version__ = "0.1.0"
