"""A transformers `Trainer` job on a sequence classifier: a tiny BERT built from a config with
`num_labels=2` and no `problem_type`, `torch_compile=True` (eager backend: Inductor is not the
point), 3 optimizer steps. The model's forward sets `config.problem_type` from the labels on its
first call, so Dynamo compiles the forward once more. `--problem-type` sets it before training."""

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.utils import logging

logging.set_verbosity_error()
parser = argparse.ArgumentParser()
parser.add_argument("--problem-type", default=None)
args = parser.parse_args()


class Labelled(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": torch.randint(0, 2, (), generator=g)}


torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
if args.problem_type:
    model.config.problem_type = args.problem_type
with tempfile.TemporaryDirectory() as out:
    training = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, max_steps=3, torch_compile=True, torch_compile_backend="eager",
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=100, dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    Trainer(model=model, args=training, train_dataset=Labelled()).train()
