"""The drop-last patch (verify/last_batch.py) on the shapes a training script gives it: which
loader it edits, how the edit reads, and why it is not made. Its effect on a real job (no
recompile left, the steps it drops, the numerics not compared): test_verify_fixes.py's ragged
batch."""

from __future__ import annotations

import ast

import pytest

from cagtool.verify.last_batch import drop_last_patch, fix_call


def _patch(source: str):
    return drop_last_patch((1,), "train.py", "train.py", source.encode())


def _changed(patch) -> list[str]:
    assert patch.applicable, patch.why_not
    ast.parse(patch.patched)  # the copy still runs
    return [line for line in patch.diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_the_one_loader_gets_drop_last_after_its_last_argument():
    patch = _patch("from torch.utils.data import DataLoader\nloader = DataLoader(data, batch_size=32, shuffle=False)\n")
    assert _changed(patch) == ["-loader = DataLoader(data, batch_size=32, shuffle=False)",
                               "+loader = DataLoader(data, batch_size=32, shuffle=False, drop_last=True)"]
    assert patch.line == 2 and patch.name == "drop-last" and patch.causes == (1,)


def test_a_call_over_several_lines_with_a_trailing_comma_keeps_its_layout():
    source = "import torch\nloader = torch.utils.data.DataLoader(\n    data,\n    batch_size=8,\n)\n"
    assert _changed(_patch(source)) == ["-    batch_size=8,", "+    batch_size=8, drop_last=True,"]


def test_the_training_loader_is_edited_and_the_evaluations_keeps_its_last_batch():
    source = ("train_loader = DataLoader(train, batch_size=64)\n"
              "test_loader = DataLoader(test, batch_size=1000)\n")
    assert _changed(_patch(source)) == ["-train_loader = DataLoader(train, batch_size=64)",
                                        "+train_loader = DataLoader(train, batch_size=64, drop_last=True)"]
    shuffled = "a = DataLoader(x, batch_size=64, shuffle=True)\nb = DataLoader(y, batch_size=1000)\n"
    assert _changed(_patch(shuffled))[1] == "+a = DataLoader(x, batch_size=64, shuffle=True, drop_last=True)"


def test_drop_last_false_is_turned_true_where_it_stands():
    assert _changed(_patch("loader = DataLoader(d, drop_last=False, batch_size=4)\n")) == [
        "-loader = DataLoader(d, drop_last=False, batch_size=4)", "+loader = DataLoader(d, drop_last=True, batch_size=4)"]


def test_an_hf_trainers_arguments_get_dataloader_drop_last():
    source = "args = TrainingArguments(output_dir='out', per_device_train_batch_size=8)\ntrainer = Trainer(model, args)\n"
    assert _changed(_patch(source))[1] == "+args = TrainingArguments(output_dir='out', per_device_train_batch_size=8, dataloader_drop_last=True)"


def test_an_hf_trainers_arguments_are_named_as_where_drop_last_is_set_not_as_a_loader():
    """HF Trainer builds its loader inside: the TrainingArguments(...) line is where
    `dataloader_drop_last` is set, not a loader (tests/scripts/hf_trainer_classifier.py's shape)."""
    source = ("args = TrainingArguments(output_dir='out', dataloader_drop_last=bool(os.environ.get('DROP')))\n"
              "trainer = Trainer(model, args)\n")
    patch = _patch(source)
    assert not patch.applicable
    assert patch.why_not == ("the TrainingArguments(...) at line 1 (HF Trainer builds its loader from them) sets "
                             "dataloader_drop_last from a value made at run time: set it to True there"), patch.why_not
    assert "loader at line" not in patch.why_not
    # The fix not applied is named as the call it would edit (verify's line opens with it), not a DataLoader's.
    assert fix_call(patch) == "TrainingArguments(..., dataloader_drop_last=True)"
    assert "TrainingArguments(dataloader_drop_last=True)" in patch.title
    loader = _patch("loader = DataLoader(data, batch_size=8, drop_last=bool(os.environ.get('DROP')))\n")
    assert not loader.applicable and fix_call(loader) == "DataLoader(..., drop_last=True)"
    assert fix_call(_patch("for i in range(0, n, 32):\n    step(x[i:i + 32])\n")) == "DataLoader(..., drop_last=True)"


def test_a_dict_of_known_keys_spread_into_the_loader_is_read_as_pytorch_examples_build_it():
    """pytorch/examples' mnist and siamese scripts pass their loaders' options as `**train_kwargs`,
    a dict of known keys updated with an accelerator's: none is drop_last, so the edit is made."""
    siamese = ("train_kwargs = {'batch_size': args.batch_size}\n"
               "test_kwargs = {'batch_size': args.test_batch_size}\n"
               "if use_accel:\n"
               "    accel_kwargs = {'num_workers': 1, 'pin_memory': True, 'shuffle': True}\n"
               "    train_kwargs.update(accel_kwargs)\n"
               "    test_kwargs.update(accel_kwargs)\n"
               "train_loader = torch.utils.data.DataLoader(train_dataset, **train_kwargs)\n"
               "test_loader = torch.utils.data.DataLoader(test_dataset, **test_kwargs)\n")
    assert _changed(_patch(siamese))[1] == "+train_loader = torch.utils.data.DataLoader(train_dataset, **train_kwargs, drop_last=True)"
    mnist_rnn = ("kwargs = {'num_workers': 1, 'pin_memory': True} if args.accel else {}\n"
                 "train_loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, **kwargs)\n"
                 "test_loader = torch.utils.data.DataLoader(ts, batch_size=1000, shuffle=True, **kwargs)\n")
    assert _changed(_patch(mnist_rnn))[1] == "+train_loader = torch.utils.data.DataLoader(ds, batch_size=64, shuffle=True, **kwargs, drop_last=True)"


@pytest.mark.parametrize("source, why", [
    ("for i in range(0, n, 32):\n    step(x[i:i + 32])\n", "no DataLoader(...) or TrainingArguments(...) call in the script"),
    ("a = DataLoader(x, shuffle=True)\nb = DataLoader(y, shuffle=True)\n", "the script makes 2 loaders (lines 1, 2)"),
    ("loader = DataLoader(d, batch_size=4, drop_last=True)\n", "already drops its last batch (drop_last=True): the smaller batch is made elsewhere"),
    ("loader = DataLoader(d, **opts)\n", "passes **kwargs, which may set drop_last"),  # never bound here: a parameter, an import
    ("opts = {'batch_size': 4}\nopts.update(extra)\nloader = DataLoader(d, **opts)\n", "passes **kwargs, which may set drop_last"),
    ("opts = {'drop_last': False}\nloader = DataLoader(d, **opts)\n", "passes **kwargs, which may set drop_last"),
    ("opts = {'batch_size': 4}\nopts[key] = 1\nloader = DataLoader(d, **opts)\n", "passes **kwargs, which may set drop_last"),
    ("def make(opts):\n    return DataLoader(d, **opts)\nopts = {}\n", "passes **kwargs, which may set drop_last"),
    ("loader = DataLoader(d, drop_last=args.drop)\n", "sets drop_last from a value made at run time"),
    ("loader = DataLoader(\n", "the script cannot be parsed (SyntaxError)"),
])
def test_no_edit_is_made_where_the_loader_is_not_plain_and_the_reason_is_said(source, why):
    patch = _patch(source)
    assert not patch.applicable and patch.patched is None and why in patch.why_not, patch.why_not


def test_a_module_job_has_no_script_to_edit():
    patch = drop_last_patch((1, 2), None, None, None)
    assert not patch.applicable and patch.why_not.startswith("the job is not a script file")
