"""A transformers `Trainer` job on a sequence classifier: a tiny BERT built from a config with
`num_labels=2` and no `problem_type`, `torch_compile=True` (eager backend: Inductor is not the
point), 3 optimizer steps. The model's forward sets `config.problem_type` from the labels on its
first call, so Dynamo compiles the forward once more. `--problem-type` sets it before training.
`--ragged`: sentences of 6 to 19 tokens, each batch padded to its longest (a collate function as
DataCollatorWithPadding's), 8 steps. `--last-batch`: 10 examples in batches of 4, 6 steps (two epochs
and a bit): each epoch ends with a batch of 2."""

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers.utils import logging

logging.set_verbosity_error()
parser = argparse.ArgumentParser()
parser.add_argument("--problem-type", default=None)
parser.add_argument("--ragged", action="store_true")
parser.add_argument("--last-batch", action="store_true")
args = parser.parse_args()


class Labelled(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10 if args.last_batch else 32

    def __getitem__(self, i: int) -> dict:
        g = torch.Generator().manual_seed(i)
        length = int(torch.randint(6, 20, (), generator=g)) if args.ragged else 16
        return {"input_ids": torch.randint(1, 100, (length,), generator=g), "labels": torch.randint(0, 2, (), generator=g)}


def padded(items: list[dict]) -> dict:
    ids = torch.nn.utils.rnn.pad_sequence([x["input_ids"] for x in items], batch_first=True)
    return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": torch.stack([x["labels"] for x in items])}


torch.manual_seed(0)
config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
if args.problem_type:
    model.config.problem_type = args.problem_type
with tempfile.TemporaryDirectory() as out:
    training = TrainingArguments(
        output_dir=out, per_device_train_batch_size=4, max_steps=8 if args.ragged else 6 if args.last_batch else 3, torch_compile=True, torch_compile_backend="eager",
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=100, dataloader_num_workers=0, disable_tqdm=True, seed=0,
    )
    Trainer(model=model, args=training, train_dataset=Labelled(), data_collator=padded if args.ragged else None).train()
