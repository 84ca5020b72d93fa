"""Tatoeba sentence pairs (manythings.org): English with German, Spanish or Mandarin Chinese.

Each corpus is one list of pairs sorted by English length, with no official split, so the split is
made here: a pair goes where a seeded hash of its *normalised English side* sends it. The rule
is a function of the sentence alone (not of its line number, nor of Python's per-process
`hash`), so it is the same on every machine and for every copy of the corpus, and every
translation of an English sentence, including copies that differ only in case, spacing or
punctuation ("Go." / "Go!"), lands in the same split: no English sentence is in two splits.

The Chinese side mixes simplified and traditional script line by line (one English sentence
often has one translation in each). It is converted to simplified with OpenCC's `t2s`, for
training and for the references alike, so the model learns one script and is scored on one;
pairs that conversion makes identical are kept once.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

from attnlab.data.corpora import Split, _corpus_file, _languages, read_pairs

FOLDERS = {"de": "tatoeba_deu_eng", "es": "tatoeba_spa_eng", "zh": "tatoeba_cmn_eng"}
# Share of distinct English sentences in valid, and again in test (a fraction, not a count, so a
# sentence's split never depends on the rest of the corpus). es: ~2,000 pairs each (1.7% of 119k;
# ~17k reference tokens per set); zh: ~1,000 each (3.2% of 32k: 2,000 would take 12% of a small
# corpus's training pairs; ~7k reference characters per set); de: 1% (~1,700 each).
HELDOUT = {"de": 0.01, "es": 0.017, "zh": 0.032}
SCRIPT = {"zh": "t2s"}  # OpenCC conversion applied to that side (simplified Chinese)
INVISIBLE = dict.fromkeys(map(ord, "\u200b\ufeff"))  # zero-width space / BOM: removed from the converted side
SPLIT_RULE = (
    "u = blake2b(f'{seed}\\0{key}', 8 bytes, big-endian) / 2**64 with key = the English side NFKC-normalised, "
    "case-folded, its \\w+ words joined by one space; valid if u < f, test if f <= u < 2f, else train"
)


def english_key(sentence: str) -> str:
    """The English side as the split sees it: NFKC, case-folded, words only ("Go." == "go!")."""
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", sentence).casefold()))


def tatoeba_side(english: str, seed: int, heldout: float = HELDOUT["de"]) -> str:
    """The split of every pair with this English sentence: a seeded hash of its key, so no
    sentence (nor a copy differing in case or punctuation) is in two splits."""
    digest = hashlib.blake2b(f"{seed}\0{english_key(english)}".encode(), digest_size=8).digest()
    u = int.from_bytes(digest, "big") / 2**64
    return "valid" if u < heldout else "test" if u < 2 * heldout else "train"


def to_simplified(lines: list[str]) -> list[str]:
    """Chinese lines in simplified script (OpenCC t2s; simplified text passes unchanged)."""
    import opencc  # lazy: Chinese data only; a training machine's own image (a GPU's) may lack it

    converter = opencc.OpenCC(f"{SCRIPT['zh']}.json")
    return [converter.convert(line).translate(INVISIBLE) for line in lines]


def tatoeba_splits(
    data_dir: Path, pair: str, seed: int, limit: int | None = None
) -> tuple[list[Split], dict[str, Any]]:
    """Train/valid/test of Tatoeba de-en, es-en or zh-en (either direction) and what was done to
    make them (the split rule and its counts, the script conversion) for meta.json. The counts are
    of the whole splits; with a `limit` (`prepare --limit`: the first `limit` pairs of each split),
    `within_limit` counts the distinct English sentences of those pairs too, the ones prepared.

    The corpora are small (at most 170k pairs), so the pairs are read, converted and assigned
    once, here, and each split streams its share in file order."""
    src, tgt = _languages(pair, set(FOLDERS) | {"en"})
    other = tgt if src == "en" else src
    files = {lang: _corpus_file(data_dir, f"{FOLDERS[other]}/train.{lang}", "tatoeba") for lang in (src, tgt)}
    english, foreign = map(list, zip(*read_pairs(files["en"], files[other]), strict=True))
    info: dict[str, Any] = {"source_pairs": len(english)}
    if other in SCRIPT:
        converted = to_simplified(foreign)
        changed = sum(a != b for a, b in zip(foreign, converted, strict=True))
        info["script"] = {
            "side": other,
            "conversion": f"OpenCC {SCRIPT[other]} (traditional -> simplified), zero-width spaces removed",
            "opencc": version("opencc"),
            "lines_changed": changed,
        }
        foreign = converted
    fraction = HELDOUT[other]
    parts: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    keys: dict[str, list[str]] = {name: [] for name in parts}  # in file order: the first `limit` are kept
    seen: set[tuple[str, str]] = set()
    for en, text in zip(english, foreign, strict=True):
        if (en.strip(), text.strip()) in seen:
            continue
        seen.add((en.strip(), text.strip()))
        side = tatoeba_side(en, seed, fraction)
        parts[side].append((en, text) if src == "en" else (text, en))
        keys[side].append(english_key(en))
    info["duplicate_pairs_dropped"] = len(english) - len(seen)
    info["split"] = {
        "rule": SPLIT_RULE,
        "heldout_fraction": fraction,
        "seed": seed,
        "pairs": {name: len(pairs) for name, pairs in parts.items()},
        "distinct_english": {name: len(set(k)) for name, k in keys.items()},
    }
    if limit is not None:
        info["split"]["within_limit"] = {"distinct_english": {name: len(set(k[:limit])) for name, k in keys.items()}}
    splits = [Split(name, lambda name=name: iter(parts[name]), (files[src], files[tgt])) for name in parts]
    return splits, info


def chinese_share(pieces: list[str]) -> dict[str, float]:
    """Of a vocabulary's pieces that hold Chinese (CJK ideographs): how many, and the share that
    are one character (the rest are multi-character words; none should be byte fragments)."""
    han = [p.lstrip("\u2581") for p in pieces if any(_is_han(c) for c in p)]
    lengths = Counter(len(p) for p in han)
    return {"pieces": len(han), "single_characters": lengths[1] / max(len(han), 1)}


def _is_han(char: str) -> bool:
    return unicodedata.name(char, "").startswith("CJK UNIFIED IDEOGRAPH")
