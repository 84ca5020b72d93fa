"""`attnlab evaluate`: sacreBLEU and chrF (with signatures), the paper's tokenized BLEU, and
labelled bracket F1 for parsing; plus the dev report the trainer writes at each checkpoint.

BLEU is sacreBLEU's, computed by the library itself on detokenized text, so the figure equals
`sacrebleu REF < HYP`. `--tokenized` adds the number the paper's tables used (tokenized text,
hyphenated compounds split as in tensor2tensor's get_ende_bleu.sh), clearly labelled: it is
not comparable with sacreBLEU.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import sacrebleu
import torch

from attnlab.errors import AttnlabError


def bleu_chrf(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    if len(hypotheses) != len(references):
        raise AttnlabError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": b.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_detail": str(b),
        "chrf": c.score,
        "chrf_signature": str(chrf.get_signature()),
    }


def _split_compounds(line: str) -> str:
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hypotheses: list[str], references: list[str]) -> float:
    """The paper's style: tokenized (sacreBLEU's 13a tokenizer standing in for Moses) and
    compounds split at hyphens, then BLEU on the tokens."""
    tok = sacrebleu.tokenizers.tokenizer_13a.Tokenizer13a()
    hyp = [_split_compounds(tok(h)) for h in hypotheses]
    ref = [_split_compounds(tok(r)) for r in references]
    return sacrebleu.metrics.BLEU(tokenize="none").corpus_score(hyp, [ref]).score


def _read(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise AttnlabError(f"cannot read {path}: {error}") from None


def dev_report(model, data_dir: str, checkpoint_dir: Path, run_dir: Path, step: int, cfg) -> dict[str, float]:
    """Dev loss/PPL over the first `cfg.eval_sentences` valid pairs, greedy BLEU (or F1) on them,
    and recorded probe traces under RUN_DIR/probes/step_N for the explorer's timeline."""
    from attnlab.api import Model
    from attnlab.batching import collate
    from attnlab.data import ParallelData, load_tokenizer
    from attnlab.train import label_smoothed_loss

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
                logits = model(batch.src, batch.tgt_in)
                summed, summed_nll = label_smoothed_loss(
                    logits, batch.tgt_out, model.config.eps_ls, model.config.pad_id
                )
                loss, nll, tokens = loss + summed.item(), nll + summed_nll.item(), tokens + batch.n_tgt_tokens
            report.update(dev_loss=loss / tokens, dev_nll=nll / tokens, dev_ppl=math.exp(min(nll / tokens, 50)))
            sources = [data.src_text(i) for i in range(n)]
            refs = [data.tgt_text(i) for i in range(n)]
            outputs = [r.text for r in api.translate(sources, beam=1, max_len_b=50 if api.task != "parse" else 300)]
            if api.task == "parse":
                from attnlab.treebank import bracket_f1, delinearize, is_spelled, parse_tree

                pairs = zip(refs, sources, strict=True)
                gold = [delinearize(ref.split(), src.split(), is_spelled(ref)) for ref, src in pairs]
                report["dev_f1"] = bracket_f1(gold, [parse_tree(o) for o in outputs])["f1"]
            else:
                report["dev_bleu"] = bleu_chrf(outputs, refs)["bleu"]
        for i in range(min(cfg.probes, len(data))):
            result = api.score(data.src_text(i), data.tgt_text(i), record=True, target_is_linear=True)
            if result.trace is not None:
                result.trace.meta["step"] = step
                result.trace.save(Path(run_dir) / "probes" / f"step_{step}" / f"probe_{i}.trace")
    model.train(was_training)
    return report


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="attnlab evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="translate/parse --src with this checkpoint, then score")
    parser.add_argument("--src", help="source sentences, one per line")
    parser.add_argument("--ref", required=True, help="references (translations, or one tree per line for parsing)")
    parser.add_argument("--hyp", help="score these outputs instead of decoding")
    parser.add_argument("--task", choices=["translate", "parse"], default=None)
    parser.add_argument("--beam", type=int)
    parser.add_argument("--alpha", type=float)
    parser.add_argument("--tokenized", action="store_true", help="also print the paper-style tokenized BLEU")
    parser.add_argument("--out", help="also write the outputs here")
    parser.add_argument("--json", action="store_true")
    from attnlab.api import add_dtype_argument

    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    refs = _read(args.ref)
    if args.hyp:
        outputs = _read(args.hyp)
        task = args.task or "translate"
    else:
        if not (args.checkpoint and args.src):
            raise AttnlabError("give --checkpoint and --src to decode, or --hyp with outputs to score")
        from attnlab.api import load

        model = load(args.checkpoint, dtype=args.dtype)
        task = args.task or model.task
        sources = _read(args.src)
        if len(sources) != len(refs):
            raise AttnlabError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(refs)}")
        outputs = [r.text for r in model.translate(sources, beam=args.beam, alpha=args.alpha, truncate=True)]
    if args.out:
        Path(args.out).write_text("".join(o + "\n" for o in outputs), encoding="utf-8")
    if task == "parse":
        from attnlab.treebank import bracket_f1, delinearize, is_spelled, parse_tree

        words = _read(args.src) if args.src else None

        def gold(i: int) -> object:
            """A Penn tree, or a prepared linearised target (`(S (NP XX )NP …`, or spelled) over --src's words."""
            if words is not None and re.search(r"(^|\s)\)\S", refs[i]):
                return delinearize(refs[i].split(), words[i].split(), is_spelled(refs[i]))
            return parse_tree(refs[i])

        report = bracket_f1([gold(i) for i in range(len(refs))], [parse_tree(o) for o in outputs])
        if args.json:
            print(json.dumps(report))
        else:
            print(
                f"labelled brackets (EVALB conventions: punctuation and root ignored): "
                f"P {report['precision']:.2f}  R {report['recall']:.2f}  F1 {report['f1']:.2f}  ({len(refs)} sentences)"
            )
        return 0
    report = bleu_chrf(outputs, refs)
    if args.tokenized:
        report["tokenized_bleu"] = tokenized_bleu(outputs, refs)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"BLEU = {report['bleu']:.2f}  {report['bleu_signature']}")
    print(f"chrF2 = {report['chrf']:.2f}  {report['chrf_signature']}")
    if args.tokenized:
        print(
            f"tokenized BLEU (paper-style, 13a tokens + compound splitting; NOT sacreBLEU) = {report['tokenized_bleu']:.2f}"
        )
    print(report["bleu_detail"], file=sys.stderr)
    return 0
