"""What a script leaves to the interpreter's exit: an atexit handler, a file written but never
closed or flushed (its namespace is a cycle: the functions refer to it), a non-daemon thread still
running, and an exit code. Each writes into the directory given as the first argument. With
`--freeze` the script calls gc.freeze() before it exits (some training scripts do, to spare the
collector): its objects are then never collected, and only the interpreter clearing __main__'s
namespace at exit runs the unclosed file's finalizer."""

import atexit
import gc
import sys
import threading
import time
from pathlib import Path

import torch

out = Path(sys.argv[1])
torch.nn.Linear(2, 2)(torch.randn(1, 2)).sum().backward()

unclosed = open(out / "unclosed.txt", "w")  # noqa: SIM115 - flushed only by its finalizer at exit
unclosed.write("buffered " * 100)


def late_thread():
    time.sleep(0.5)
    (out / "thread.txt").write_text("joined")


threading.Thread(target=late_thread).start()
atexit.register(lambda: (out / "atexit.txt").write_text("ran"))
if "--freeze" in sys.argv:
    gc.freeze()
print("script done", flush=True)
sys.exit(3)
