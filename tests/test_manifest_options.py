"""The manifests' `options` are typed (record/manifest.py, ModeOptions and RunOptions): every key a
real run writes is declared there, the loader checks the declared keys' types, and a key it does
not know (a newer cagtool's) is kept as written."""

from __future__ import annotations

import json

import pytest

from cagtool.record.loader import load_run
from cagtool.record.manifest import ModeManifest, ModeOptions, RunOptions, mode_manifest_from_dict, to_dict


def _all_records(run):
    for record in run.modes.values():
        yield record
        yield from record.processes.values()


def test_every_option_a_real_run_writes_is_declared(record_run):
    recorded = record_run("graph_breaks.py", "3", modes="eager,aot,ca")
    run = load_run(recorded.path)
    assert set(run.meta.options) <= set(RunOptions.__annotations__), set(run.meta.options) - set(RunOptions.__annotations__)
    for record in _all_records(run):
        written = set(json.loads((record.path / "manifest.json").read_text())["options"])
        assert written and written <= set(ModeOptions.__annotations__), written - set(ModeOptions.__annotations__)


def _manifest(**options) -> dict:
    manifest = ModeManifest(mode="ca", argv=[], target={}, cwd="/", versions={}, backend="eager", dynamic=False, started_at="")
    manifest.options.update(options)  # type: ignore[typeddict-item]
    return json.loads(json.dumps(to_dict(manifest)))


def test_a_declared_option_of_the_wrong_type_is_refused_naming_it():
    with pytest.raises(TypeError, match=r"got `str` - at `\$.options.max_steps`"):
        mode_manifest_from_dict(_manifest(max_steps="ten"))
    with pytest.raises(TypeError, match=r"at `\$.options.step_tracking_errors.count`"):
        mode_manifest_from_dict(_manifest(step_tracking_errors={"count": "2", "last": None}))


def test_an_option_only_a_newer_cagtool_writes_is_kept():
    manifest = mode_manifest_from_dict(_manifest(max_steps=10, from_the_future={"a": 1}))
    assert manifest.options == {"max_steps": 10, "from_the_future": {"a": 1}}
