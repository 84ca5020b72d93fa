"""Alignment error rate: a hypothesis's word links scored against human gold, as Och & Ney (2003).

Links are sets of (source_word, target_word) pairs, 0-indexed. Human gold has sure links S and
possible links P (S ⊆ P: a sure link is also possible); a hypothesis A is scored by precision
|A∩P|/|A| (None where A is empty), recall |A∩S|/|S| and AER = 1 − (|A∩S| + |A∩P|)/(|A| + |S|). A
corpus's AER sums the counts over its sentences before taking the one ratio, as published AERs
do. Kept apart from `alignment`, which reads links out of attention: the metric needs no model,
and `attnlab evaluate --task align --hyp` scores any aligner's links with it (fast_align's, a
human's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from attnlab.decode.pharaoh import link_set
from attnlab.errors import AttnlabError


def _counts(hypothesis: Iterable, sure: Iterable, possible: Iterable) -> np.ndarray:
    a, s = link_set(hypothesis, "hypothesis"), link_set(sure, "sure")
    p = link_set(possible, "possible") | s  # a sure link is also a possible one
    return np.array([len(a), len(s), len(a & s), len(a & p)])


def _report(counts: np.ndarray) -> dict[str, Any]:
    """Precision, recall and AER from (|A|, |S|, |A∩S|, |A∩P|). Precision of no links at all
    (0/0) is None, undefined: read as 1.0 it printed "precision 100.00" for an aligner that linked
    nothing. Recall of an empty gold is 1.0 and AER of both empty 0.0: an empty hypothesis against
    an empty gold is a perfect match (`evaluate` refuses gold without sure links before scoring)."""
    n_hyp, n_sure, hit_sure, hit_possible = (int(c) for c in counts)
    return {
        "aer": 1.0 - (hit_sure + hit_possible) / (n_hyp + n_sure) if n_hyp + n_sure else 0.0,
        "precision": hit_possible / n_hyp if n_hyp else None,
        "recall": hit_sure / n_sure if n_sure else 1.0,
        "hypothesis_links": n_hyp,
        "sure_links": n_sure,
        "sure_hits": hit_sure,
        "possible_hits": hit_possible,
    }


def aer(hypothesis: Iterable[tuple[int, int]], sure: Iterable[tuple[int, int]], possible: Iterable[tuple[int, int]]):
    """Och & Ney's precision, recall and AER of one sentence's links (a dict, also the counts)."""
    return _report(_counts(hypothesis, sure, possible))


def corpus_aer(
    hypotheses: Sequence[Iterable[tuple[int, int]]],
    sures: Sequence[Iterable[tuple[int, int]]],
    possibles: Sequence[Iterable[tuple[int, int]]],
) -> dict[str, Any]:
    """AER over a corpus: the counts summed over sentences, then one ratio (as published AERs)."""
    for name, lines in (("hypotheses", hypotheses), ("sures", sures), ("possibles", possibles)):
        if isinstance(lines, str | bytes) or not isinstance(lines, Sequence):  # None: a TypeError from len()
            raise AttnlabError(f"{name} is a list of each sentence's links, got {type(lines).__name__}")
    if not len(hypotheses) == len(sures) == len(possibles):
        raise AttnlabError(f"{len(hypotheses)} hypothesis, {len(sures)} sure and {len(possibles)} possible lines")
    total = np.zeros(4, dtype=np.int64)
    for a, s, p in zip(hypotheses, sures, possibles, strict=True):
        total += _counts(a, s, p)
    return {**_report(total), "sentences": len(hypotheses)}
