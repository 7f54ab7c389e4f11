# Simulates a torch build without compiled autograd, for the bad-input test: whenever a process
# imports torch._dynamo.compiled_autograd, the module comes without `_enable`. Done when the module
# is imported, not here: every python process started with this on its path runs this file, and
# importing torch._dynamo here cost cagtool's own parent process (which never imports torch) ~4.5 s
# of CPU before the mode process that meets the missing function had started.
import importlib.abc
import importlib.util
import sys

_NAME = "torch._dynamo.compiled_autograd"


class _WithoutEnable(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _NAME:
            return None
        sys.meta_path.remove(self)  # the real spec, found by the other finders
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            del module._enable

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _WithoutEnable())
