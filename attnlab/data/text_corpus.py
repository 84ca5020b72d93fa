"""Any parallel text as a corpus (`attnlab data prepare text --train SRC TGT --valid SRC TGT
[--test SRC TGT] --pair SRC-TGT`): one pair per line, in two files a split. A user's own files
are where the sides get mixed up, and a model trained on them says nothing of it: the same file
given twice trains a copy task, and files named the other way round from `--pair` train the
other direction under the pair's name (an English→Chinese corpus prepared as zh-en then scored its
Chinese outputs with sacrebleu's 13a tokenizer: 0.0 BLEU where `tok:zh` gives 86). The first is
said (a copy task is a fair experiment: its attention is the diagonal); the second is refused."""

from __future__ import annotations

import filecmp
from pathlib import Path

from attnlab.data.corpora import TEXT_SPLITS, Split, file_split
from attnlab.errors import DataError, warn


def text_splits(files: dict[str, tuple[str | Path, str | Path]], pair: str) -> list[Split]:
    """The splits of `files` ({"train": (SRC, TGT), "valid": ..., "test": ...}), each checked
    against `pair` (`check_sides`)."""
    missing = [name for name in TEXT_SPLITS[:2] if name not in files]
    if missing:
        raise DataError(f"a text corpus needs --{' and --'.join(missing)} SRC TGT")
    splits = []
    for name in TEXT_SPLITS:
        if name in files:
            src, tgt = (Path(path) for path in files[name])
            for path in (src, tgt):
                if not path.is_file():
                    raise DataError(f"--{name}: {path} is not a file")
            check_sides(name, src, tgt, pair)
            splits.append(file_split(name, src, tgt))
    return splits


def check_sides(name: str, src: Path, tgt: Path, pair: str) -> None:
    """Warn of a split whose two sides are one file (or two copies of it); refuse one whose files
    end in the pair's two language codes the other way round (`train.en train.zh` with `--pair zh-en`)."""
    one = src.samefile(tgt)
    if one or filecmp.cmp(src, tgt, shallow=False):  # (a copy task may be meant: said, not refused)
        said = "is both the source and the target" if one else f"and {tgt} are the same text"
        warn(f"--{name}: {src} {said}: the model learns to copy its input")
    src_lang, _, tgt_lang = pair.partition("-")
    if src_lang != tgt_lang and [language_suffix(src), language_suffix(tgt)] == [tgt_lang, src_lang]:
        raise DataError(
            f"--{name}: {src.name} and {tgt.name} are named {tgt_lang} then {src_lang}, the reverse of --pair "
            f"{pair}; give the {src_lang} file first, or --pair {tgt_lang}-{src_lang}"
        )


def language_suffix(path: Path) -> str:
    """The last suffix of `path`'s name, `.gz` aside, without its dot: "en" for train.en.gz."""
    name = path.name.removesuffix(".gz")
    return Path(name).suffix[1:].lower()
