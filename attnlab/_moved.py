"""Old import paths keep working after the move into rooms (docs/ARCHITECTURE.md).

Until version 0.1 attnlab was one flat package (`attnlab.trace`, `attnlab.api`,
`attnlab.explore`, ...). Code and notebooks written against those paths still import: each old
module is a forwarding module that finds a name in the module(s) that hold it now and warns
with a `DeprecationWarning` naming the new place. A name that no longer exists
fails with an `AttributeError`/`ImportError` that names the new modules. `attnlab.widgets` is
the notebooks' documented entry point, so it forwards without a warning.

The old paths that are rooms now (`attnlab.model`, `attnlab.record`, `attnlab.data`,
`attnlab.train`, `attnlab.decode`, `attnlab.viz`) are real packages that re-export what the old
modules held; they need nothing from here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

MOVED: dict[str, tuple[str, ...]] = {
    "attnlab.api": (
        "attnlab.decode.api",
        "attnlab.decode.loading",
        "attnlab.decode.commands",
        "attnlab.decode.align_command",
    ),
    "attnlab.batching": ("attnlab.data.batching",),
    "attnlab.checkpoint": ("attnlab.model.checkpoint", "attnlab.train.average"),
    "attnlab.config": ("attnlab.model.config",),
    "attnlab.constrain": ("attnlab.decode.constrain",),
    "attnlab.download": ("attnlab.data.download",),
    "attnlab.evaluate": ("attnlab.decode.evaluate", "attnlab.train.dev"),
    "attnlab.explore": (
        "attnlab.app.checkpoints",
        "attnlab.record.equation",
        "attnlab.decode.ablation",
        "attnlab.data.tokenizer",
        "attnlab.app.serve",
    ),
    "attnlab.flops": ("attnlab.model.flops",),
    "attnlab.presets": ("attnlab.model.presets",),
    "attnlab.recipes": ("attnlab.train.recipes",),
    "attnlab.stats": ("attnlab.record.stats",),
    "attnlab.trace": ("attnlab.record.trace",),
    "attnlab.treebank": ("attnlab.data.treebank",),
    "attnlab.widgets": ("attnlab.app.widgets",),
}
PUBLIC = frozenset({"attnlab.widgets"})  # documented paths: forwarded without a warning


class ForwardingModule(ModuleType):
    """An old module path: attribute lookups go to the modules that hold the names now."""

    targets: tuple[str, ...] = ()

    def __getattr__(self, name: str) -> Any:
        if name == "__all__":  # `from attnlab.widgets import *` imported nothing, without a word
            return [n for t in self.targets for n in getattr(importlib.import_module(t), "__all__", ())]
        if name.startswith("__"):
            raise AttributeError(name)
        for target in self.targets:
            module = importlib.import_module(target)
            if hasattr(module, name):
                if self.__name__ not in PUBLIC:
                    warnings.warn(f"{self.__name__}.{name} moved to {target}.{name}", DeprecationWarning, stacklevel=2)
                return getattr(module, name)
        raise AttributeError(
            f"{self.__name__}.{name} does not exist; {self.__name__} moved to {', '.join(self.targets)}"
        )

    def __dir__(self) -> list[str]:
        return sorted({n for t in self.targets for n in dir(importlib.import_module(t)) if not n.startswith("_")})


class MovedFinder(MetaPathFinder, Loader):
    """Answers imports of the old paths with a `ForwardingModule`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        return ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = ForwardingModule(spec.name, f"moved to {', '.join(MOVED[spec.name])}")
        module.targets = MOVED[spec.name]
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the names are found on first use. `__file__` is the new home's file,
        which is what `from OLD import missing` prints in its ImportError."""
        module.__file__ = importlib.util.find_spec(MOVED[module.__name__][0]).origin


def install() -> None:
    """Put the finder first on `sys.meta_path`, once: an old path must never find a stale file of
    an earlier install (an editable install's finder maps every `attnlab.*` name to its folder)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedFinder())
