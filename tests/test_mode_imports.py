"""What a mode process imports beyond the script: cagtool's instruments load none of torch's heavy
compile machinery that the job itself does not load (each such import is CPU every mode of every run
pays, and an eager mode runs no compiler). The Dynamo taps on modules the job has not imported yet
are put on when the job imports them, and then read what they read before.
Real torch, each check in a fresh interpreter (what is imported is a per-process fact)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, cagtool_cmd

# Pulled in by the AOT modules the taps need (Inductor's code cache, torch.export's serialisation,
# filelock), and the AOT modules themselves.
HEAVY = (
    "torch._functorch._aot_autograd.graph_compile",
    "torch._functorch._aot_autograd.aot_autograd_result",
    "torch._inductor.codecache",
    "torch._export.serde.schema",
    "filelock",
    "depyf",
    "rich",
    "pandas",
)

EAGER_JOB = textwrap.dedent("""
    import json, sys
    import torch

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
    print(json.dumps(sorted(name for name in sys.argv[1].split(",") if name in sys.modules)))
""")


@pytest.mark.slow
def test_eager_mode_imports_no_compile_machinery_the_script_does_not(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(EAGER_JOB)
    env = {**os.environ, "CI": "true"}
    seen = {}
    for name, cmd in (
        ("python", [sys.executable, str(script)]),
        ("cagtool", cagtool_cmd("run", "--modes", "eager", "--no-report", "-o", str(tmp_path / "r"), str(script))),
    ):
        proc = subprocess.run([*cmd, ",".join(HEAVY)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["python"] == []  # the job itself loads none of them
    assert seen["cagtool"] == seen["python"]


DEFERRED_TAPS = textwrap.dedent("""
    import importlib.machinery, json, sys
    from pathlib import Path
    import torch, torch._dynamo

    from cagtool.capture.observe import dynamo_taps
    from cagtool.capture.observe.torch_logs import StructuredLogHandler
    from cagtool.capture.steps.tracker import StepTracker
    from cagtool.capture.writer import RecordWriter
    from cagtool.record.loader import load_mode
    from cagtool.record.manifest import ModeManifest
    from cagtool.record.schema import AotBackwardGraphEvent

    AOT = "torch._functorch._aot_autograd.graph_compile"
    out = {"before_install": AOT in sys.modules}
    originals = {}
    manifest = ModeManifest(mode="aot", argv=[], target={}, cwd=sys.argv[1], versions={}, backend="aot_eager", dynamic=False, started_at="")
    writer = RecordWriter(Path(sys.argv[1]) / "aot", manifest)
    handler = StructuredLogHandler(writer, StepTracker(writer, "aot"))
    taps = dynamo_taps.install(handler)
    out["after_install"] = AOT in sys.modules
    out["finder_while_pending"] = any(isinstance(f, dynamo_taps._TapOnImport) for f in sys.meta_path)

    def f(x):
        return (x * 2).sin()

    torch.compile(f, backend="aot_eager")(torch.ones(3, requires_grad=True)).sum().backward()
    module = sys.modules[AOT]
    out["finder_after_import"] = any(isinstance(f, dynamo_taps._TapOnImport) for f in sys.meta_path)
    out["loader"] = type(module.__loader__).__name__
    out["spec_loader"] = type(module.__spec__.loader).__name__
    out["tapped"] = getattr(module._log_fw_bw_graphs, "__wrapped__", None) is not None
    out["installed"] = len(taps._installed)
    taps.uninstall()
    out["restored"] = not hasattr(module._log_fw_bw_graphs, "__wrapped__")
    writer.close()
    out["errors"] = handler.errors
    out["aot_backward"] = len(load_mode(Path(sys.argv[1]) / "aot").of(AotBackwardGraphEvent))
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_taps_on_modules_not_yet_imported_go_on_when_the_job_imports_them(tmp_path):
    proc = subprocess.run([sys.executable, "-c", DEFERRED_TAPS, str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "before_install": False,
        "after_install": False,  # not imported by cagtool
        "finder_while_pending": True,
        "finder_after_import": False,  # off sys.meta_path once every tapped module is imported
        "loader": "SourceFileLoader",  # the module keeps torch's own loader
        "spec_loader": "SourceFileLoader",
        "tapped": True,
        "installed": len(_tapped_names()),
        "restored": True,
        "errors": 0,
        "aot_backward": 1,
    }


def _tapped_names() -> tuple:
    from cagtool.capture.observe.dynamo_taps import TAPPED

    return TAPPED


def test_uninstall_before_the_import_leaves_nothing_behind():
    """A tapped module imported after the taps came off is imported untapped, and the finder is gone."""
    from cagtool.capture.observe.dynamo_taps import _TapOnImport

    seen = []
    finder = _TapOnImport({"json.tool"}, seen.append)
    sys.meta_path.insert(0, finder)
    finder.close()
    assert finder not in sys.meta_path
    sys.modules.pop("json.tool", None)
    import json.tool  # noqa: F401

    assert seen == []


def test_a_pending_module_is_imported_by_its_own_finder_then_handed_over():
    from cagtool.capture.observe.dynamo_taps import _TapOnImport

    seen = []
    finder = _TapOnImport({"json.tool", "not.a.module"}, seen.append)
    sys.meta_path.insert(0, finder)
    try:
        sys.modules.pop("json.tool", None)
        import json.tool

        assert seen == [json.tool]
        assert type(json.tool.__loader__).__name__ == "SourceFileLoader"
        assert finder in sys.meta_path  # "not.a.module" is still pending
        assert finder.names == {"not.a.module"}
    finally:
        finder.close()
    assert finder not in sys.meta_path
