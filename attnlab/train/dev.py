"""What the trainer measures at each checkpoint: dev loss and perplexity, greedy BLEU (tokenized
as `attnlab evaluate` does for the target language: `zh` for Chinese) or bracket F1 for a parser
on the first dev sentences, and the probe traces the explorer's training timeline replays
(`RUN_DIR/probes/step_N/probe_K.trace`), and with `align_gold` every cross-attention head's
alignment error rate on human links (`RUN_DIR/probes/step_N/alignment.json`), so the timeline
shows when a head became an aligner; with probes, every head's importance on the dev pairs
(`RUN_DIR/probes/step_N/importance.json`), so it shows when a head became one the model needs.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch

from attnlab.data.batching import collate
from attnlab.data.corpora import alignment_set, read_text
from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import load_tokenizer
from attnlab.data.treebank import bracket_f1, delinearize, is_spelled, parse_tree
from attnlab.decode.alignment import aer_grid
from attnlab.decode.api import Model
from attnlab.decode.evaluate import bleu_chrf, bleu_tokenize
from attnlab.decode.evaluate_inputs import word_counts
from attnlab.decode.pharaoh import Links, read_pharaoh
from attnlab.errors import AttnlabError, DataError
from attnlab.publish import temporary_sibling
from attnlab.record.importance import pair_importance
from attnlab.record.trace import KINDS
from attnlab.train.regime import label_smoothed_loss


def dev_report(model, data_dir: str, checkpoint_dir: Path, run_dir: Path, step: int, cfg) -> dict[str, float]:
    """Dev loss/PPL over the first `cfg.eval_sentences` valid pairs, greedy BLEU (or F1) on them,
    and recorded probe traces under RUN_DIR/probes/step_N for the explorer's timeline."""
    data = ParallelData(data_dir, "valid")
    n = min(cfg.eval_sentences, len(data))
    was_training = model.training
    model.eval()
    report: dict[str, float] = {}
    api = Model(
        model,
        load_tokenizer(Path(data_dir) / "spm.model"),
        {"task": data.meta.get("task", "translate"), "data": data.meta},
        str(checkpoint_dir),
    )
    with torch.no_grad():
        if n:
            loss = nll = tokens = 0.0
            for start in range(0, n, 64):
                batch = collate(
                    data,
                    list(range(start, min(n, start + 64))),
                    model.config.pad_id,
                    model.config.bos_id,
                    model.config.eos_id,
                )
                logits = model(batch.src, batch.tgt_in, batch.scored)
                summed, summed_nll = label_smoothed_loss(
                    logits, batch.scored_targets, model.config.eps_ls, model.config.pad_id
                )
                loss, nll, tokens = loss + summed.item(), nll + summed_nll.item(), tokens + batch.n_tgt_tokens
            report.update(dev_loss=loss / tokens, dev_nll=nll / tokens, dev_ppl=math.exp(min(nll / tokens, 50)))
            sources = [data.src_text(i) for i in range(n)]
            refs = [data.tgt_text(i) for i in range(n)]
            outputs = [r.text for r in api.translate(sources, beam=1, max_len_b=50 if api.task != "parse" else 300)]
            if api.task == "parse":
                pairs = zip(refs, sources, strict=True)
                gold = [delinearize(ref.split(), src.split(), is_spelled(ref)) for ref, src in pairs]
                report["dev_f1"] = bracket_f1(gold, [parse_tree(o) for o in outputs])["f1"]
            else:
                report["dev_bleu"] = bleu_chrf(outputs, refs, bleu_tokenize(data.meta.get("tgt_lang")))["bleu"]
        for i in range(min(cfg.probes, len(data))):
            result = api.score(data.src_text(i), data.tgt_text(i), record=True, target_is_linear=True)
            if result.trace is not None:
                result.trace.meta["step"] = step
                result.trace.save(Path(run_dir) / "probes" / f"step_{step}" / f"probe_{i}.trace")
        if cfg.probes > 0 and len(data):
            folder = Path(run_dir) / "probes" / f"step_{step}"
            report["dev_importance"] = importance_report(model, data, max(n, min(cfg.probes, len(data))), folder)
        if cfg.align_gold:
            report["dev_aer"] = alignment_report(
                api, cfg.align_gold, Path(run_dir) / "probes" / f"step_{step}", cfg.align_pairs
            )
    model.train(was_training)
    return report


def importance_report(model: torch.nn.Module, data: ParallelData, n: int, folder: Path) -> float:
    """Every head's importance (`attnlab.record.importance`) on the first `n` dev pairs, saved as
    FOLDER/importance.json ({"pairs", "gradient": [kind][layer][head]}, written whole or not at
    all: the timeline reads it), so the timeline shows when each head became one the model needs;
    the largest head's importance."""
    eos = model.config.eos_id
    pairs = [([*map(int, data.src(i)), eos], [*map(int, data.tgt(i)), eos]) for i in range(n)]
    weighed = pair_importance(model, pairs)
    folder.mkdir(parents=True, exist_ok=True)
    table = {"pairs": n, "kinds": list(KINDS), "gradient": weighed.gradient.tolist()}
    path = folder / "importance.json"
    partial = temporary_sibling(path, directory=False)
    partial.write_text(json.dumps(table))
    os.replace(partial, path)
    return float(weighed.gradient.max())


def alignment_report(api: Model, name: str, folder: Path, limit: int = 0) -> float:
    """Every reading's AER on the first `limit` (0: all) pairs of the alignment set `name` (in
    either direction: a set written target ||| source for this model is read reversed), saved as
    FOLDER/alignment.json; the best AER."""
    lines, gold, languages = alignment_pairs(name)
    data = api.meta.get("data", {})
    reverse = languages == (data.get("tgt_lang"), data.get("src_lang"))
    if limit:
        gold, lines = gold[:limit], lines[:limit]
    rows, _ = aer_grid(api, lines, [s for s, _ in gold], [p for _, p in gold], reverse)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "alignment.json").write_text(json.dumps({"set": name, "pairs": len(lines), "rows": rows}))
    return rows[0]["aer"]


def alignment_pairs(name: str) -> tuple[list[str], list[tuple[Links, Links]], tuple[str, str]]:
    """(pairs, gold links, languages) of the alignment set `name`, read whole and checked, at
    start-up too: every line a `source ||| target` pair, the gold read from 1 (as the shared sets
    are written) with a line a pair and each link inside its pair's words. A gold written from 0
    failed at the first checkpoint, a thousand updates on; tab-separated pairs scored AER 1.0 at
    every checkpoint, and a link past its sentence was scored."""
    pairs, gold_path, languages = alignment_set(name)
    lines = read_text(pairs)
    lengths = [word_counts(line) for line in lines]
    if (bad := next((i for i, n in enumerate(lengths) if n is None), None)) is not None:
        raise DataError(f"--align-gold {name}: {pairs}:{bad + 1} is not a `source ||| target` pair")
    try:
        gold = read_pharaoh(gold_path, one_indexed=True, lengths=lengths)
    except AttnlabError as error:  # (the set's links count words from 1, source word first)
        raise DataError(f"--align-gold {name}: {error} (a set's links count words from 1)") from None
    return lines, gold, languages
