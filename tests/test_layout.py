"""The package's layout holds: which room may import which (docs/ARCHITECTURE.md), no import
cycles, no imports hidden inside functions, small modules, and old import paths that still work.

The imports are read from the source (ast), not by importing, so a forbidden import is caught
even where it would happen to run fine today. The checker is tested on synthetic modules too,
so that a layout test that cannot fail is caught as well.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400

# What each room may import (besides itself). `errors` is the one module every room shares.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "publish": {"errors"},  # attnlab/publish.py: a directory written in one step, by every room that writes one
    "model": {"errors", "publish"},
    "record": {"errors", "model", "publish"},
    "data": {"errors", "publish"},
    "decode": {"errors", "model", "record", "data", "publish"},
    "train": {"errors", "model", "record", "data", "decode", "publish"},
    "viz": {"errors", "record", "data"},
    "app": {"errors", "model", "record", "data", "decode", "viz"},
    "cli": {"errors"},  # the command table imports each command's module by name, when it runs
    "package": {"errors", "model", "record", "moved", "decode"},  # attnlab/__init__.py (decode: lazily)
    "moved": set(),  # old import paths: forwarding modules, resolved by name on first use
    "main": {"cli"},
}
LAZY_MARKERS = ("# lazy:", "# optional:")  # the only imports allowed inside a function say why


def module_name(path: Path) -> str:
    """`attnlab/decode/api.py` -> `attnlab.decode.api`; `apps/explorer.py` -> `apps.explorer`."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def room(module: str) -> str:
    """The room a module belongs to (the entry points under apps/ are the app's)."""
    parts = module.split(".")
    if parts[0] == "apps":
        return "app"
    if len(parts) == 1:
        return "package"
    return {"_moved": "moved", "__main__": "main"}.get(parts[1], parts[1])


def imports(module: str, source: str, modules: set[str]) -> list[tuple[str, int, bool, str]]:
    """(imported attnlab module, line, inside a function?, the source line) for every import."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = "." * child.level + (child.module or "")  # relative imports are not used: reported
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in child.names]
            for target in targets:
                if target.split(".")[0] in ("attnlab", ""):
                    found.append((target, child.lineno, in_function, lines[child.lineno - 1]))
            visit(child, nested)

    visit(tree, False)
    return found


def violations(sources: dict[str, str]) -> list[str]:
    """Every breach of the layout rules among `sources` ({module name: source text})."""
    modules = set(sources)
    problems = []
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, source in sources.items():
        for target, line, in_function, text in imports(module, source, modules):
            if target not in modules:
                problems.append(f"{module}:{line} imports {target}, which does not exist")
                continue
            here, there = room(module), room(target)
            if here != there and there not in ALLOWED[here]:
                problems.append(f"{module}:{line} imports {target}: room {here!r} may not import {there!r}")
            if in_function and not any(marker in text for marker in LAZY_MARKERS):
                problems.append(f"{module}:{line} imports {target} inside a function without saying why")
            if not in_function:
                graph[module].add(target)
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component) + [sorted(component)[0]])

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def project_sources() -> dict[str, str]:
    files = sorted((ROOT / "attnlab").rglob("*.py")) + sorted((ROOT / "apps").glob("*.py"))
    return {module_name(path): path.read_text(encoding="utf-8") for path in files}


# -- the project ------------------------------------------------------------------------------------------
def test_imports_follow_the_layering_and_form_no_cycle() -> None:
    sources = project_sources()
    assert len(sources) > 40 and {room(m) for m in sources} >= set(ALLOWED) - {"errors"} | {"app"}
    assert violations(sources) == []


def test_modules_are_small() -> None:
    sizes = {m: s.count("\n") for m, s in project_sources().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_every_room_says_what_it_may_import() -> None:
    rooms = [p for p in (ROOT / "attnlab").iterdir() if (p / "__init__.py").is_file()]
    assert {p.name for p in rooms} >= {"model", "record", "data", "train", "decode", "viz", "app"}
    for path in rooms:
        doc = ast.get_docstring(ast.parse((path / "__init__.py").read_text(encoding="utf-8")))
        assert doc and "May import" in doc, f"attnlab/{path.name}/__init__.py must say what it may import"


def _loaded_by(code: str) -> set[str]:
    code += "; import sys; print(' '.join(sorted(sys.modules)))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


def test_importing_attnlab_stays_light() -> None:
    """`import attnlab` and the command line's `import attnlab.cli` load no PyTorch (Ctrl-C in
    the second it takes to import was a traceback: `attnlab COMMAND` had not reached the line
    that says "interrupted"); the first public name loads the model and the recorder only: no
    decoder, data code or screen, and not PyTorch's compiler (torch._dynamo: 2 s more)."""
    assert "torch" not in _loaded_by("import attnlab") | _loaded_by("import attnlab.cli")
    loaded = _loaded_by("import attnlab; attnlab.Transformer")
    heavy = {
        "sentencepiece",
        "sacrebleu",
        "bokeh",
        "panel",
        "ipywidgets",
        "attnlab.decode",
        "attnlab.data",
        "torch._dynamo",
    }
    assert "attnlab.model" in loaded and loaded.isdisjoint(heavy)


def test_attnlab_record_is_the_function_and_its_room() -> None:
    """`attnlab.record(model)` records, before and after the decoder imports the room, and the
    room's modules are reached as modules are: `import attnlab.record.stats as stats` failed
    with "cannot import name 'stats' from 'record' (unknown location)" while the package's
    attribute was the function, and `attnlab.record.norm_trace` was an AttributeError."""
    code = (
        "import attnlab\n"
        "from attnlab.model import Transformer, preset\n"
        "model = Transformer(preset('tiny'))\n"
        "with attnlab.record(model) as first: pass\n"
        "import attnlab.decode.api, attnlab.record.stats as stats, attnlab.record as room\n"
        "with attnlab.record(model) as second: pass\n"
        "print(type(first).__name__, type(second).__name__, stats.head_stats.__name__, room.norm_trace.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout == "Recording Recording head_stats norm_trace\n", done.stderr[-2000:]


def test_attnlab_load_is_the_documented_function() -> None:
    """`help(attnlab.load)` shows what it opens and its dtypes: a wrapper had a one-line docstring."""
    import attnlab
    from attnlab.decode.loading import load

    assert attnlab.load is load and "Marian" in (attnlab.load.__doc__ or "")


def test_loading_a_checkpoint_and_translating_stay_off_the_compiler() -> None:
    """Nor does loading the bundled model and translating with it: `load_model` checks the
    weights' shapes on a model built on the meta device, where nn.Embedding's own draw and the
    sinusoidal table's sin ran as decompositions that import torch._dynamo (1.4 s of every
    `attnlab translate`)."""
    checkpoint = ROOT / "checkpoints" / "multi30k-en-de"
    code = (
        f"import sys, attnlab; attnlab.load({str(checkpoint)!r}).translate('A dog runs.'); print(sorted(sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'attnlab.decode'" in loaded and "'torch._dynamo'" not in loaded


# -- the checker itself can fail -------------------------------------------------------------------------
def test_the_checker_catches_a_forbidden_import_a_cycle_and_a_hidden_import() -> None:
    sources = {
        "attnlab.errors": "",
        "attnlab.model.bad": "from attnlab.viz.head import heatmap\n",  # the core importing a screen's view
        "attnlab.viz.head": "from attnlab.errors import AttnlabError\n",
        "attnlab.viz.a": "from attnlab.viz import b\n",
        "attnlab.viz.b": "import attnlab.viz.a\n",
        "attnlab.data.lazy": "def f():\n    from attnlab.errors import AttnlabError\n",
        "attnlab.data.ok": "def f():\n    from attnlab.errors import AttnlabError  # lazy: says why\n",
    }
    found = violations(sources)
    assert any("attnlab.model.bad:1 imports attnlab.viz.head: room 'model' may not import 'viz'" in p for p in found)
    assert "import cycle: attnlab.viz.a -> attnlab.viz.b -> attnlab.viz.a" in found
    assert any(p.startswith("attnlab.data.lazy:2") and "inside a function" in p for p in found)
    assert not any(p.startswith(("attnlab.data.ok", "attnlab.viz.head")) for p in found)
    assert len(found) == 3


def test_the_checker_sees_a_forbidden_import_added_to_the_real_tree() -> None:
    sources = project_sources()
    sources["attnlab.record.recorder"] += "\nfrom attnlab.train.loop import Trainer\n"
    assert [p for p in violations(sources) if "room 'record' may not import 'train'" in p]


# -- old import paths ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("attnlab.trace", "AttentionTrace", "attnlab.record.trace"),
        ("attnlab.api", "load", "attnlab.decode.loading"),
        ("attnlab.api", "cli_translate", "attnlab.decode.commands"),
        ("attnlab.explore", "attention_parts", "attnlab.record.equation"),
        ("attnlab.checkpoint", "average_run", "attnlab.train.average"),
        ("attnlab.evaluate", "dev_report", "attnlab.train.dev"),
        ("attnlab.config", "preset", "attnlab.model.config"),
    ],
)
def test_old_import_paths_still_work_and_name_the_new_place(old: str, name: str, new: str) -> None:
    module = __import__(old, fromlist=[name])
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to {new}.{name}"):
        found = getattr(module, name)
    assert found is getattr(__import__(new, fromlist=[name]), name)


def test_old_paths_that_became_rooms_and_the_public_widgets_path() -> None:
    from attnlab.model import Transformer, attention  # attnlab.model was a module, now a room
    from attnlab.record import ablate, record

    assert Transformer.__module__ == "attnlab.model.transformer" and callable(attention)
    assert callable(record) and callable(ablate)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the notebooks' entry point forwards without a warning
        from attnlab.widgets import explore, plot, setup

    assert explore.__module__ == "attnlab.app.widgets" and callable(plot) and callable(setup)
    star: dict[str, object] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from attnlab.widgets import *", star)  # it imported nothing, without a word
    assert {"explore", "show", "replay", "compare_models", "figure_words"} <= star.keys()


def test_a_name_that_is_gone_fails_naming_the_new_place() -> None:
    with pytest.raises(ImportError, match=r"attnlab/record/trace\.py"):
        from attnlab.trace import no_such_name  # noqa: F401
