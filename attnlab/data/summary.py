"""The table `attnlab data prepare` prints from a prepared directory's meta.json: pairs and
tokens kept and dropped per split, and how the corpus was split and converted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlab.data.tokenizer import MAX_SENTENCE_BYTES


def summary(meta: dict[str, Any], out: Path) -> str:
    """The table `prepare` prints: kept and dropped pairs and tokens per split."""
    lines = [
        f"prepared {meta['corpus']} {meta['src_lang']}-{meta['tgt_lang']} into {out} in {meta['seconds']:.1f} s "
        f"(shared BPE vocabulary of {meta['vocab_size']} pieces)",
        f"  {'split':<16}{'pairs':>10}{'src tokens':>13}{'tgt tokens':>13}{'dropped empty':>15}{'dropped long':>14}",
    ]
    for name, s in meta["splits"].items():
        lines.append(
            f"  {name:<16}{s['pairs']:>10,}{s['src_tokens']:>13,}{s['tgt_tokens']:>13,}"
            f"{s['dropped_empty']:>15,}{s['dropped_long']:>14,}"
        )
    lines.append(f"  (pairs with a side over {meta['max_len']} tokens are dropped from train only)")
    if meta["corpus"] == "wmt14" and meta["train_dir"].endswith("opennmt_toy_ende"):
        lines.append("  note: the default 10k training sample is Moses-tokenized; newstest2013/2014 are raw text")
    if skipped := meta.get("spm_skipped_lines"):
        lines.append(
            f"  the vocabulary was learnt without {skipped['src']:,} source and {skipped['tgt']:,} target training "
            f"lines longer than {MAX_SENTENCE_BYTES:,} bytes (sentencepiece skips them; over half a side is refused)"
        )
    if meta.get("limit"):
        lines.append(f"  (only the first {meta['limit']:,} pairs of each split: --limit)")
    if "tatoeba" in meta:
        about, rule = meta["tatoeba"], meta["tatoeba"]["split"]
        distinct = rule.get("within_limit", rule)["distinct_english"]  # of the pairs prepared, not the whole split
        english = ", ".join(f"{name} {n:,}" for name, n in distinct.items())
        lines.append(
            f"  split by a seeded hash of the normalised English side ({rule['heldout_fraction']:.1%} of the English "
            f"sentences to valid, as many to test); distinct English sentences: {english}"
        )
        if about["duplicate_pairs_dropped"]:
            lines.append(f"  {about['duplicate_pairs_dropped']:,} repeated pairs kept once")
        if "script" in about:
            script = about["script"]
            lines.append(
                f"  {script['side']}: {script['conversion']}; {script['lines_changed']:,} of "
                f"{about['source_pairs']:,} lines changed"
            )
    if "chinese_pieces" in meta:
        chinese = meta["chinese_pieces"]
        lines.append(
            f"  {chinese['pieces']:,} pieces hold Chinese, {chinese['single_characters']:.0%} of them one character "
            f"(the rest are words); character_coverage {meta['spm']['character_coverage']}"
        )
    return "\n".join(lines)
