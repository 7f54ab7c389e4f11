"""A transformers `Trainer` job as its users write one: a tiny GPT-2 built from a config,
`torch_compile=True` (eager backend: Inductor is not the point), gradient accumulation 2, 12
optimizer steps, an evaluation every 4 (`eval_strategy="steps"`: between two training steps, with
the model switched to eval mode). The model's loss function warns once through the library's logger
(`warning_once`), a graph break nested under transformers' forward wrapper."""

import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> dict:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=12,
        torch_compile=True, torch_compile_backend="eager", use_cpu=True, report_to=[],
        save_strategy="no", logging_steps=100, eval_strategy="steps", eval_steps=4, dataloader_num_workers=0, disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=Tokens(), eval_dataset=Tokens()).train()
