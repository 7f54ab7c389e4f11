"""A DataLoader whose last batch is smaller (40 samples by 16: 16, 16, 8), through a compiled model:
the recompile `recompiles --explain --verify` answers with TORCH_COMPILE_DYNAMIC_SOURCES. With that
variable set (a fix's re-run), the job hangs after its first step, as a job can when a fix makes its
compile slower than anyone waits; it writes its pid to $HANG_PID_FILE first, so a test can see that
the stopped re-run left no process behind.

    python hangs_under_a_fix.py
"""

import os
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(40, 8), torch.randn(40, 1)), batch_size=16)
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)), backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _epoch in range(2):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if os.environ.get("TORCH_COMPILE_DYNAMIC_SOURCES"):
                with open(os.environ["HANG_PID_FILE"], "w") as f:
                    f.write(str(os.getpid()))
                time.sleep(3600)
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
