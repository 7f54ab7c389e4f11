"""capture/on_import.py: a call right after a module the process imports later, once; an error in
it never fails the job's import; the finder leaves sys.meta_path when it waits for nothing."""

import sys

from cagtool.capture.on_import import OnImport


def test_each_call_runs_once_after_its_module_and_a_failing_one_never_fails_the_import(tmp_path, monkeypatch):
    (tmp_path / "cag_first.py").write_text("VALUE = 1\n")
    (tmp_path / "cag_second.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def fails(module):
        seen.append(("second", module.VALUE))
        raise RuntimeError("cagtool's call failed")

    finder = OnImport.install({"cag_first": lambda module: seen.append(("first", module.VALUE)), "cag_second": fails})
    try:
        import cag_first  # noqa: F401

        assert seen == [("first", 1)] and finder in sys.meta_path
        import cag_second  # the call's error stays in cagtool

        assert cag_second.VALUE == 2 and seen == [("first", 1), ("second", 2)]
        assert finder not in sys.meta_path and finder.pending == {}
    finally:
        finder.remove()
        for name in ("cag_first", "cag_second"):
            sys.modules.pop(name, None)
