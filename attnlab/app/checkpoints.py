"""What both screens (the Panel explorer and the notebook widgets) need besides drawing, free of
Panel and ipywidgets: the bundled checkpoints, a loaded model shared by all sessions of one
server (loaded once, read only: sessions never change the weights), and the probe traces a
training run recorded at each checkpoint (the training timeline).
"""

from __future__ import annotations

import re
import stat
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnlab.app.i18n import DEFAULT, language_code, language_name, text
from attnlab.decode.loading import load
from attnlab.errors import CheckpointError, json_loads
from attnlab.model.checkpoint import STEP_DIR, step_dirs, user_path
from attnlab.record.trace import KINDS

ROOT = Path(__file__).resolve().parents[2]  # the source checkout: apps/, checkpoints/
BUNDLED = ROOT / "checkpoints"


def find_checkpoints(
    extra: Sequence[str | Path] = (),
    bundled: Path = BUNDLED,
    roots: Sequence[str | Path] = (),
    lang: str = DEFAULT,
) -> dict[str, str]:
    """{display name: path}: the bundled checkpoints, the checkpoints and runs directly inside
    each of `roots` (named ROOT/NAME), then the given ones (kept even when they are not
    checkpoints, so that the app can say what is wrong with them). Names are what visitors see:
    what the model does, when its config says (`describe`, in the page's language `lang`), then
    its directory, e.g. "EN→DE translator · multi30k-en-de" ("Traductor EN→DE · ...", "英→德
    翻译模型 · ..."); a name taken twice gets " (2)", never the server path that would tell
    them apart."""
    found: dict[str, str] = {}

    def add(name: str, path: Path) -> None:
        if any(same_directory(path, other) for other in found.values()):
            return
        what = describe(path, lang)
        name = f"{what} · {name}" if what else name
        unique, n = name, 2
        while unique in found:
            unique, n = f"{name} ({n})", n + 1
        found[unique] = str(path)

    if bundled.is_dir():
        for path in sorted(bundled.iterdir()):
            if (path / "manifest.json").is_file():
                add(path.name, path)
    for root in roots:
        root = user_path(root)
        for path in _inside(root):
            add(f"{root.name}/{path.name}", path)
    for path in extra:
        path = user_path(path)
        add(path.name or "checkpoint", path)
    return found


def _inside(root: Path) -> list[Path]:
    """The checkpoints and runs directly inside `root`, sorted, leaving out what the server cannot
    read: a directory another user keeps to themselves (mode 0700) made `is_file` raise
    PermissionError (Python 3.11), and every session of a server with such a root lost its page
    to the traceback. It could not be opened anyway."""
    found = []
    for path in _listing(root):
        try:
            if (path / "manifest.json").is_file() or (path / "checkpoints").is_dir():
                found.append(path)
        except OSError:
            continue
    return found


def _listing(directory: Path) -> list[Path]:
    """What `directory` holds, sorted; [] for one that is not a directory (any more) or that the
    server cannot read (another user's, mode 0700): `iterdir` raised PermissionError."""
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


CORPORA = {"ptb": "WSJ", "wsj": "WSJ", "multi30k": "Multi30k", "wmt14": "WMT14", "iwslt": "IWSLT"}
_CODE = re.compile(r"^[a-z]{2,3}$")  # a language code; anything else in a config is not shown
_CONFIG_BYTES = 1 << 20  # a config.json is a few kB; a bigger one is not read for a name
_TABLE_BYTES = 16 << 20  # an alignment.json: every reading's row, well under a MB
# A probe trace: a dev sentence's maps, a few MB for big; a bigger one is not read whole into the
# server's memory (a 40 GiB sparse file there took a session's every byte)
_PROBE_BYTES = 256 << 20


def describe(path: str | Path, lang: str = DEFAULT) -> str:
    """What a checkpoint (or a run: its newest step) does, from its config.json's meta, in `lang`:
    "EN→DE translator", "English parser (WSJ)" ("Traductor EN→DE", "英语句法分析模型（WSJ）");
    "" when the config does not say. Only the catalogue's words, language codes and known
    corpora are shown, so a name never carries anything else a config holds."""
    path = Path(path)
    try:  # a run whose checkpoints/ the server cannot read is listed without a description
        steps = step_dirs(path) if not (path / "config.json").is_file() else []
        config = (steps[-1][1] if steps else path) / "config.json"
        if not _regular(config, _CONFIG_BYTES):  # a FIFO there blocked the picker's scan for good
            return ""
        meta = json_loads(config.read_text()).get("meta", {})
        data = meta.get("data", {})
        task, src, tgt = data.get("task", meta.get("task")), data.get("src_lang"), data.get("tgt_lang")
        corpus = CORPORA.get(data.get("corpus"), "")
    except (OSError, ValueError, AttributeError, TypeError):
        return ""
    if not isinstance(src, str) or not _CODE.match(src):
        return ""
    if task == "parse":
        language = language_name(src, lang)
        if corpus:
            return text("checkpoint.parser_corpus", lang, language=language, corpus=corpus)
        return text("checkpoint.parser", lang, language=language)
    if task == "translate" and isinstance(tgt, str) and _CODE.match(tgt):
        return text("checkpoint.translator", lang, src=language_code(src, lang), tgt=language_code(tgt, lang))
    return ""


def _regular(path: Path, most: int) -> bool:
    """A regular file (after links) of at most `most` bytes: what is safe to read whole."""
    try:
        info = path.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= most


def same_directory(a: str | Path, b: str | Path) -> bool:
    """`a` and `b` name the same directory (relative or absolute, through symlinks or not)."""
    return user_path(a).resolve() == user_path(b).resolve()


_MODELS: dict[str, tuple[tuple, Any]] = {}  # resolved path: (its files' stamp, the model)
_LOCK = threading.Lock()
_READ_FIRST = ("manifest.json", "config.json", "model.safetensors", "pytorch_model.bin", "spm.model")


def open_model(path: str | Path) -> Any:
    """`attnlab.load(path)`, cached per process (server sessions share one read-only model),
    and loaded again once what is on disk there changes: a run trained further, a checkpoint
    written over. The cache kept the first model read from a path for the kernel's life, so a
    teacher who trained on, or imported into the same folder, kept exploring the old one while
    `attnlab.load` and `replay` read the new one."""
    if not str(path).strip():  # as `load` refuses it: resolved first, "" named the working directory instead
        raise CheckpointError("expected a checkpoint directory's path, got an empty one")
    key = str(user_path(path).resolve())
    with _LOCK:
        if not Path(key).exists():
            raise CheckpointError(f"{path}: no such directory")
        stamp = _stamp(Path(key))
        if key not in _MODELS or _MODELS[key][0] != stamp:
            _MODELS[key] = (stamp, load(key))
        return _MODELS[key][1]


def _stamp(path: Path) -> tuple:
    """What changes when the model `load(path)` reads does: checkpoints are written whole under
    another name and renamed into place (the directory's entries change: a new step in a run's
    `checkpoints/`, a checkpoint replaced), and a copy over the files changes theirs."""
    found = []
    for part in (path, path / "checkpoints", *(path / name for name in _READ_FIRST)):
        try:
            status = part.stat()
        except OSError:
            found.append(None)
        else:
            found.append((status.st_ino, status.st_mtime_ns, status.st_size))
    return tuple(found)


def _probe_roots(path: str | Path, allows: Callable[[Path], bool]) -> list[Path]:
    """Where a checkpoint's training snapshots may be: `probes/` in the directory itself (a
    bundled checkpoint or a run directory) or in the run directory above `RUN/checkpoints/step_N`;
    a served explorer passes `allows` (its roots'), so that nothing above a root is read."""
    path = Path(path)
    found = (path / "probes", path.parent / "probes", path.parent.parent / "probes")
    return [c for c in found if _is_directory(c) and allows(c)]


def _is_directory(path: Path) -> bool:
    """`path.is_dir()`, False where the server may not look (it raised PermissionError)."""
    try:
        return path.is_dir()
    except OSError:
        return False


def probe_snapshots(path: str | Path, allows: Callable[[Path], bool] = lambda _: True) -> list[tuple[int, list[Path]]]:
    """(step, probe trace files `probes/step_N/probe_K.trace`) recorded during training, oldest
    first; only files `allows` (a served explorer's roots). A `probes/` or a step directory the
    server cannot read (another user's, mode 0700) is left out as the picker leaves such runs
    out: its PermissionError was a traceback, and the Training tab of that model never opened."""
    for root in _probe_roots(path, allows):
        steps = []
        for step_dir in _listing(root):
            match = STEP_DIR.match(step_dir.name)
            files = _probe_files(step_dir, allows) if match else []
            if files:
                steps.append((int(match.group(1)), files))
        if steps:
            return sorted(steps)
    return []


def _probe_files(step_dir: Path, allows: Callable[[Path], bool]) -> list[Path]:
    """A step's probe traces, by probe number, each a regular file of at most `_PROBE_BYTES`; [] for
    a step directory the server cannot read."""
    try:
        files = [f for f in step_dir.glob("probe_*.trace") if allows(f) and _regular(f, _PROBE_BYTES)]
    except OSError:
        return []
    return sorted(files, key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))


def alignment_snapshots(path: str | Path, allows: Callable[[Path], bool] = lambda _: True) -> dict[int, dict[str, Any]]:
    """{step: the AER table a run with `align_gold` wrote at that checkpoint}, oldest first
    (`probes/step_N/alignment.json`: the set's name, its pair count and every reading's row)."""
    return _step_tables(path, allows, "alignment.json", _alignment_table)


def importance_snapshots(path: str | Path, allows: Callable[[Path], bool] = lambda _: True) -> dict[int, np.ndarray]:
    """{step: every head's importance on the dev pairs at that checkpoint, (kinds, layers, heads)},
    oldest first (`probes/step_N/importance.json`, which `attnlab train` writes with its probes)."""
    return _step_tables(path, allows, "importance.json", _importance_table)


def importance_curves(
    tables: dict[int, np.ndarray], kind: str, layer: int, lang: str
) -> tuple[list[int], dict[str, list[float]]] | None:
    """(steps, {each head's name in `lang`: its importance at each step}) of one kind and layer
    from `importance_snapshots`' tables; None when no table has that layer (none at all, or
    tables of another model's shape), which the timelines then leave out."""
    tables = {step: table for step, table in tables.items() if layer < table.shape[1]}
    if not tables:
        return None
    steps, k = list(tables), KINDS.index(kind)
    heads = min(table.shape[2] for table in tables.values())
    return steps, {
        text("timeline.curve", lang, head=h): [float(tables[s][k, layer, h]) for s in steps] for h in range(heads)
    }


def _step_tables(path: str | Path, allows: Callable[[Path], bool], name: str, read: Callable[[Path], Any]) -> dict:
    """{step: `read(probes/step_N/name)`} of the first probe root that has any, oldest first;
    regular files of a sane size only (a FIFO or /dev/zero there hung or exhausted the server),
    and a file `read` refuses (None) left out."""
    for root in _probe_roots(path, allows):
        tables = {}
        for table in root.glob(f"step_*/{name}"):
            match = STEP_DIR.match(table.parent.name)
            found = read(table) if match and allows(table) and _regular(table, _TABLE_BYTES) else None
            if found is not None:
                tables[int(match.group(1))] = found
        if tables:
            return dict(sorted(tables.items()))
    return {}


def _importance_table(path: Path) -> np.ndarray | None:
    """The (kinds, layers, heads) gradients of an importance.json, or None for what is not one."""
    try:
        table = json_loads(path.read_text(encoding="utf-8"))
        values = np.asarray(table["gradient"], dtype=np.float64)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    good = values.ndim == 3 and values.shape[0] == len(KINDS) and values.size and np.isfinite(values).all()
    return values if good else None


def _alignment_table(path: Path) -> dict[str, Any] | None:
    """An AER table as the timeline draws it ({"set": ..., "rows": [{"reading": str, "aer": number,
    ...}, ...]}), or None for a file that is not one: the dev evaluation writes it in place, so a
    run killed then left it cut short, and the timeline tab failed with a JSONDecodeError (a
    KeyError for a table of other fields). Its step is then drawn without AER."""
    try:
        table = json_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rows = table.get("rows") if isinstance(table, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    for row in rows:
        if not (isinstance(row, dict) and isinstance(row.get("reading"), str)):
            return None
        if isinstance(row.get("aer"), bool) or not isinstance(row.get("aer"), int | float):
            return None
    return table
