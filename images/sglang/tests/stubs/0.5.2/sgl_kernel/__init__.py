"""CPU stand-in for ``sgl_kernel``, SGLang 0.5.2's CUDA kernel package, for the disaggspec transfer tests.

SGLang modules import kernel names from it at module level, but the transfer path under test never calls one. Every
attribute, and every ``sgl_kernel.<sub>`` module listed in ``_SUBMODULES``, resolves to a callable that raises, so a
test that did reach a kernel fails loudly instead of silently computing nothing.
"""

import importlib.abc
import importlib.machinery
import sys
import types


def _gpu_only(qualname):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"{qualname} is a GPU-only sgl_kernel function (CPU test stub)")

    kernel.__name__ = qualname.rsplit(".", 1)[-1]
    kernel.__qualname__ = qualname
    return kernel


def _module_getattr(module_name):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _gpu_only(f"{module_name}.{name}")

    return __getattr__


# Only the submodules SGLang imports unconditionally; others (e.g. scalar_type) must raise ImportError, because
# SGLang probes for them and falls back when they are absent.
_SUBMODULES = {"flash_attn", "kvcacheio"}


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the listed ``sgl_kernel.<sub>`` modules as stubs of the same kind."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + ".") and fullname.split(".")[1] in _SUBMODULES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        return None


__getattr__ = _module_getattr(__name__)
__version__ = "0.3.9.post2"
if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleFinder())
