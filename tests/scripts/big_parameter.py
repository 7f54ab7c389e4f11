# One large parameter (64 MiB float32) trained for two steps; prints the process's peak RSS as the
# script ends (ru_maxrss, bytes), for a test that the recorded peak is the job's, not cagtool's.
import json
import resource

import torch

weight = torch.nn.Parameter(torch.ones(16 * 2**20))
opt = torch.optim.SGD([weight], lr=0.01)
for _ in range(2):
    (weight * 2).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
print(json.dumps({"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
