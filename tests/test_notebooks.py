"""Every notebook in notebooks/ runs top to bottom in a fresh kernel, and fails the test on any error.

The kernel is this interpreter (the project's virtual environment), declared in a kernelspec
written to a temporary directory, so no user-wide kernel is involved. Notebooks read their models
from $ATTNLAB_TRANSLATOR / $ATTNLAB_PARSER / $ATTNLAB_RESTRICTED: the bundled checkpoints when they exist, otherwise
random-weight tiny fixtures built here (notebooks never assert quality, only that they run).
Notebooks that train or evaluate take small settings from $ATTNLAB_NB_* so the file stays quick
on two cores. Executed copies are written to test-artifacts/notebooks/ for inspection.

Each notebook also exists in Spanish and Chinese (`02_inside_attention.es.ipynb`, `.zh.ipynb`):
the same code (checked here, so that a change to the English one is not forgotten in the others),
its prose, comments and printed words translated, its widgets called with `lang=` and its figures
drawn with `words=figure_words(lang=...)`. They run like the others, on the same small settings,
so a translation whose code only matches in shape but fails when run is caught too.
"""

from __future__ import annotations

import ast
import json
import os
import random
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts" / "notebooks"
BUNDLED = {
    "ATTNLAB_TRANSLATOR": ROOT / "checkpoints" / "multi30k-en-de",
    "ATTNLAB_PARSER": ROOT / "checkpoints" / "wsj-parser",
    "ATTNLAB_RESTRICTED": ROOT / "checkpoints" / "multi30k-en-de-r3",
}
SMALL = {  # what the notebooks' knobs default to is for a reader; the test needs only that they run
    "ATTNLAB_NB_SENTENCES": "6",
    "ATTNLAB_NB_TRAIN_STEPS": "4",
    "ATTNLAB_NB_SAVE_EVERY": "2",
    "ATTNLAB_NB_TRAIN_MINUTES": "1",
    "OMP_NUM_THREADS": "1",  # two threads on two busy cores spin-wait for each other: 4x slower
}
NEEDS_CORPORA = {  # notebook -> a file of the shared corpora it reads
    "03_what_heads_do.ipynb": "multi30k/test2016.en",
    "04_training_dynamics.ipynb": "multi30k/train.en",
    "05_parsing.ipynb": "ptb_wsj_sample/mrg/wsj_0180.mrg",
}
LANGUAGES = ("es", "zh")  # every notebook is also in these, as NAME.LANG.ipynb
WIDGETS = ("show", "explore", "replay", "compare_models", "figure_words")  # what takes `lang=`
KERNEL = "attnlab-test"

# Word lists for the fixture tokenizer (written for these tests, not from a corpus).
EN = "a the man woman dog child girl boy runs sits plays jumps in on under near park street water red blue small big old with ball bike shirt hat guitar".split()
DE = "ein eine der die das mann frau hund kind mädchen junge läuft sitzt spielt springt im auf unter neben park straße wasser rot blau klein groß alt mit ball fahrrad hemd hut gitarre".split()
LABELS = ("S", "NP", "VP", "PP", "SBAR", "ADJP", "ADVP", "WHNP", "QP", "PRN")


def make_checkpoints(base: Path) -> dict[str, Path]:
    """Random-weight tiny translator and parser on a tokenizer trained here (no corpus needed).

    `max_len` is small because an untrained model never emits </s> by itself: decoding runs to
    the length limit, and beam 21 (the parser's) over 300 extra steps would take minutes."""
    from attnlab import Transformer, preset
    from attnlab.data.tokenizer import train_tokenizer
    from attnlab.model.checkpoint import save_checkpoint

    rng = random.Random(0)
    sentences = [
        " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + " ."
        for words in (EN, DE)
        for _ in range(400)
    ]
    base.mkdir(parents=True, exist_ok=True)
    symbols = ["XX", *(f"{side}{label}" for label in LABELS for side in "()")]
    tokenizer = train_tokenizer(sentences, base / "spm", 420, 1, symbols)
    paths = {"translate": base / "tiny-translator", "parse": base / "tiny-parser", "restricted": base / "tiny-r3"}
    for seed, (name, path) in enumerate(paths.items(), 1):
        torch.manual_seed(seed)
        window = 3 if name == "restricted" else None
        config = preset("tiny", vocab_size=tokenizer.get_piece_size(), max_len=48, attn_window=window)
        task = "parse" if name == "parse" else "translate"
        save_checkpoint(path, Transformer(config), base / "spm.model", meta={"task": task})
    return paths


def model_env(base: Path) -> dict[str, str]:
    """ATTNLAB_TRANSLATOR / ATTNLAB_PARSER / ATTNLAB_RESTRICTED: as set by the caller, else the
    bundled checkpoints when they exist, else random-weight fixtures built under `base`."""
    env = {name: str(path) for name, path in BUNDLED.items() if (path / "manifest.json").is_file()}
    env.update({name: os.environ[name] for name in BUNDLED if os.environ.get(name)})
    if len(env) < len(BUNDLED):
        fixtures = make_checkpoints(base)
        env.setdefault("ATTNLAB_TRANSLATOR", str(fixtures["translate"]))
        env.setdefault("ATTNLAB_PARSER", str(fixtures["parse"]))
        env.setdefault("ATTNLAB_RESTRICTED", str(fixtures["restricted"]))
    return env


def kernelspec(directory: Path, name: str = KERNEL) -> Path:
    """A kernelspec for this interpreter in `directory`/kernels (what `ipykernel install
    --prefix` writes, without the logos); returns the kernels directory."""
    spec = directory / "kernels" / name
    spec.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "attnlab (tests)", "language": "python"})
    )
    return directory / "kernels"


def has_corpus_file(relative: str) -> bool:
    from attnlab.data.corpora import find_data_dir
    from attnlab.errors import DataError

    try:
        return (find_data_dir() / relative).is_file()
    except DataError:
        return False


@pytest.fixture(scope="module")
def notebook_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("notebooks")
    (base / "tmp").mkdir()  # the kernel's temporary files (04's training run) go where pytest cleans up
    return {**SMALL, **model_env(base), "TMPDIR": str(base / "tmp")}


@pytest.fixture(scope="module")
def kernel_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kernelspec(tmp_path_factory.mktemp("kernelspec"))


def notebook_names() -> list[str]:
    return sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))


def original(name: str) -> str:
    """The English notebook a translation (`NAME.LANG.ipynb`) translates; an English one's own name."""
    stem, *lang, _ = name.split(".")
    return f"{stem}.ipynb" if lang else name


def translations() -> list[tuple[str, str]]:
    """(file, language) of every translated notebook."""
    return [(name, name.split(".")[1]) for name in notebook_names() if original(name) != name]


def test_six_notebooks_each_in_english_spanish_and_chinese() -> None:
    english = [name for name in notebook_names() if original(name) == name]
    assert [name[:3] for name in english] == ["01_", "02_", "03_", "04_", "05_", "06_"]
    expected = {f"{name[: -len('.ipynb')]}.{lang}.ipynb" for name in english for lang in LANGUAGES}
    assert {name for name, _ in translations()} == expected


class _Wordless(ast.NodeTransformer):
    """A cell's code with its words taken out: strings (and f-strings' text) emptied, `lang=` dropped."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant("") if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.Tuple([self.visit(v.value) for v in node.values if isinstance(v, ast.FormattedValue)], ast.Load())

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node.keywords = [k for k in node.keywords if k.arg != "lang"]
        return self.generic_visit(node)


def code_cells(name: str) -> list[str]:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "code"]


def markdown_cells(name: str) -> list[str]:
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    return [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]


def calls(cells: list[str]) -> list[ast.Call]:
    return [node for cell in cells for node in ast.walk(ast.parse(cell)) if isinstance(node, ast.Call)]


@pytest.mark.parametrize(("name", "lang"), translations())
def test_a_translation_runs_the_same_code_in_its_language(name: str, lang: str) -> None:
    english, translated = code_cells(original(name)), code_cells(name)
    assert len(translated) == len(english), f"{name}: not the code cells of {original(name)}"
    for number, (mine, theirs) in enumerate(zip(translated, english, strict=True)):
        assert ast.dump(_Wordless().visit(ast.parse(mine))) == ast.dump(_Wordless().visit(ast.parse(theirs))), (
            f"{name}: code cell {number} is not the code of {original(name)}'s"
        )
    widget_calls = [call for call in calls(translated) if getattr(call.func, "id", "") in WIDGETS]
    assert widget_calls and all(
        any(k.arg == "lang" and getattr(k.value, "value", None) == lang for k in call.keywords) for call in widget_calls
    ), f"{name}: every widget, and the figures' words, is called with lang={lang!r}"
    figures = [call for call in calls(translated) if getattr(getattr(call.func, "value", None), "id", "") == "viz"]
    assert all(any(k.arg == "words" for k in call.keywords) for call in figures), (
        f"{name}: a figure is drawn with English words"
    )
    prose, english_prose = markdown_cells(name), markdown_cells(original(name))
    assert len(prose) == len(english_prose), f"{name}: not the text cells of {original(name)}"
    untranslated = [
        number for number, (mine, theirs) in enumerate(zip(prose, english_prose, strict=True)) if mine == theirs
    ]
    assert not untranslated, f"{name}: text cells {untranslated} are still in English"
    text = " ".join(prose)
    assert any(c in text for c in "ñóéáí¿") if lang == "es" else sum("\u4e00" <= c <= "\u9fff" for c in text) > 200


@pytest.mark.parametrize("name", notebook_names())
def test_notebook_is_committed_without_outputs(name: str) -> None:
    cells = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))["cells"]  # (as committed: `read` adds ids)
    assert all("id" in cell for cell in cells), f"{name}: a cell without an id (a hard error in later nbformat)"
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: a cell was committed with outputs"
    assert "widgets" not in notebook.metadata, f"{name}: saved widget state"


@pytest.mark.slow
@pytest.mark.parametrize("name", notebook_names())
def test_notebook_runs(
    name: str, notebook_env: dict[str, str], kernel_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    needed = NEEDS_CORPORA.get(original(name))
    if needed and not has_corpus_file(needed):
        pytest.skip(f"needs {needed} of the shared corpora (../shared/data or $ATTNLAB_DATA)")
    for key, value in notebook_env.items():  # the kernel inherits this process's environment
        monkeypatch.setenv(key, value)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    manager = KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dirs)]))
    client = NotebookClient(
        notebook, km=manager, timeout=300, kernel_name=KERNEL, resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    try:
        client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, ARTIFACTS / name)
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    # BokehJS itself is inlined (attnlab.widgets.setup); the browser test checks no request leaves the machine.
    assert "cdn.bokeh.org" not in json.dumps(outputs), "BokehJS was loaded from bokeh's CDN"
    widgets = [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widgets, f"{name} displays no widget"
    # nothing on stderr, which JupyterLab shows red, as an error (notebook 04's training log was)
    red = [o.get("text", "")[:80] for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert red == [], f"{name} writes to stderr: {red}"
