"""Records written as a closed mode process leaves them (manifest, events.jsonl, the columns
sidecar), from events built in the test: shared by the tests of the sidecar and of the step figures."""

from __future__ import annotations

import json

from cagtool.record.columns import write_sidecar
from cagtool.record.loader import load_mode
from cagtool.record.manifest import ModeManifest, RunMeta, to_dict
from cagtool.record.schema import SCHEMA_VERSION, Event, event_to_dict, json_default


def manifest(mode: str = "ca", schema_version: int = SCHEMA_VERSION) -> ModeManifest:
    return ModeManifest(mode=mode, argv=[], target={"kind": "script", "name": "train.py"}, cwd="/", versions={}, backend="eager", dynamic=False,
                        started_at="", status="finished", exit_code=0, schema_version=schema_version)


def line(event: Event) -> str:
    return json.dumps(event_to_dict(event), default=json_default)


def write_run(root, lines_by_mode: dict[str, list[str]], sidecar: bool = True, schema_version: int = SCHEMA_VERSION):
    for mode, lines in lines_by_mode.items():
        (root / mode).mkdir(parents=True)
        (root / mode / "manifest.json").write_text(json.dumps(to_dict(manifest(mode, schema_version))))
        (root / mode / "events.jsonl").write_text("".join(text + "\n" for text in lines))
        if sidecar:
            write_sidecar(root / mode)
    meta = RunMeta(run_id=root.name, created_at="", cagtool_argv=[], target={"kind": "script", "name": "train.py"}, target_argv=[], cwd="/",
                   modes=list(lines_by_mode), versions={}, machine={}, status="finished", exit_code=0)
    (root / "run.json").write_text(json.dumps(to_dict(meta)))
    return root


def both_loads(mode_dir, **options):
    """The record read through the sidecar and read line by line."""
    return load_mode(mode_dir, columns=True, **options), load_mode(mode_dir, columns=False, **options)
