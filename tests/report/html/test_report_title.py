"""The report is named after the user's script, also when a launcher module ran it: a job run as
`cagtool run -m torch.distributed.run --nproc-per-node 2 train_ddp.py` reads "train_ddp.py", not
"torch.distributed.run" (the capture names its run directory by the same rule)."""

from __future__ import annotations

import importlib.util
import json
import sys

from conftest import ROOT

from cagtool.record.loader import load_run
from cagtool.record.target_name import launched_script, target_label, target_title
from cagtool.report.html.document import write_report

LAUNCHED = ["torch.distributed.run", "--nproc-per-node", "2", "sample_scripts/train_ddp.py", "--steps", "3"]


def test_a_launcher_module_is_named_after_the_script_it_runs():
    assert launched_script("module", "torch.distributed.run", LAUNCHED[1:]) == "sample_scripts/train_ddp.py"
    assert target_title({"kind": "module", "name": "torch.distributed.run"}, LAUNCHED) == "sample_scripts/train_ddp.py"
    assert target_label("module", "torch.distributed.run", LAUNCHED[1:]) == "train_ddp"
    # Anything else keeps its own name.
    assert target_title({"kind": "script", "name": "train.py"}, ["train.py", "x.py"]) == "train.py"
    assert target_title({"kind": "module", "name": "pkg.train"}, ["pkg.train", "a.py"]) == "pkg.train"
    assert target_title({"kind": "module", "name": "torch.distributed.run"}, ["torch.distributed.run", "--help"]) == "torch.distributed.run"


def test_the_ddp_report_title_is_the_script(tmp_path):
    path = ROOT / "tests" / "report" / "ranks" / "rank_records.py"
    spec = importlib.util.spec_from_file_location("rank_records_for_title", path)
    rr = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = rr
    spec.loader.exec_module(rr)
    run_dir = rr.write_multi_rank_run(tmp_path / "ddp", {0: rr.Rank(), 1: rr.Rank()})
    meta = json.loads((run_dir / "run.json").read_text())
    meta["target"] = {"kind": "module", "name": "torch.distributed.run"}
    meta["target_argv"] = LAUNCHED
    (run_dir / "run.json").write_text(json.dumps(meta))
    html = write_report(load_run(run_dir)).path.read_text()
    assert "<title>cagtool report: sample_scripts/train_ddp.py</title>" in html
    assert "<h1>cagtool report: sample_scripts/train_ddp.py</h1>" in html
    assert "<h2>sample_scripts/train_ddp.py --steps 3</h2>" in html  # the run's heading: the script and its arguments
    assert "torch.distributed.run --nproc-per-node 2 sample_scripts/train_ddp.py --steps 3" in html  # the command, in the facts
