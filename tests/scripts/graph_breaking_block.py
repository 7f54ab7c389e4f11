"""A module whose forward breaks the graph (imported by resume_frame_shapes.py): the break is in
this file, inside a call the caller's compiled function makes."""

import torch


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        torch._dynamo.graph_break()
        return torch.relu(self.lin(x))
