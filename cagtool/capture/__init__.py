"""Running the user's script under instrumented compiled autograd, and writing the run record."""
