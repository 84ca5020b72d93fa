"""`attnlab evaluate`: sacreBLEU and chrF (with signatures), the paper's tokenized BLEU,
labelled bracket F1 for parsing, and alignment error rate for word alignment (`--task align`).

BLEU is sacreBLEU's, computed by the library itself on detokenized text, so the figure equals
`sacrebleu REF < HYP`, with `-tok zh` for a Chinese target: the tokenizer follows the target
language in the checkpoint's meta (`--tokenize` overrides it), and the signature says which.
`--tokenized` adds an approximation of the number the paper's tables used (tokenized text,
hyphenated compounds split as in tensor2tensor's get_ende_bleu.sh; sacreBLEU's 13a tokenizer
stands in for Moses' tokenizer.perl), labelled: it is not comparable with sacreBLEU.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

from attnlab.data.tokenizer import HAN, is_blank, mostly_han
from attnlab.data.treebank import Tree, bracket_f1, delinearize, flat, is_spelled, parse_tree
from attnlab.decode.aer import corpus_aer
from attnlab.decode.align_command import add_alignment_arguments, link_rule
from attnlab.decode.alignment import aer_grid, diagonal_links
from attnlab.decode.commands import add_dtype_argument, add_search_arguments, cut_notice, fit_lines
from attnlab.decode.evaluate_inputs import (
    one_indexed_hint,
    opened,
    refuse_blank,
    refuse_unused,
    save_best_target,
    script_hint,
    word_counts,
)
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import read_pharaoh
from attnlab.decode.streams import check_out, one_stdin, read_input, write_out
from attnlab.errors import ArgumentParser, AttnlabError
from attnlab.model.checkpoint import MANIFEST, update_meta
from attnlab.model.memory import keep_freed_memory

ROUGE = ("rouge1", "rouge2", "rougeL")
BLEU_TOKENIZE = {"zh": "zh"}  # target language -> sacreBLEU tokenizer (as sacrebleu -l xx-zh picks); else 13a
TOKENIZERS = ("13a", "intl", "zh", "char", "none")  # sacreBLEU's tokenizers that need no download
LINEARISED = re.compile(r"(^|\s)\)[^\s()]")  # `)NP`: a prepared target closes each phrase with its label
TREE = re.compile(r"\([^\s()]+ [^\s()]+\)")  # `(NN cat)`: a Penn tree's word under its tag


def bleu_tokenize(tgt_lang: str | None) -> str:
    """sacreBLEU's tokenizer for a target language: `zh` for Chinese (written without spaces, so
    13a would see each sentence as one word), else its default `13a`."""
    return BLEU_TOKENIZE.get(tgt_lang or "", "13a")


def bleu_chrf(hypotheses: list[str], references: list[str], tokenize: str | None = None) -> dict[str, Any]:
    """Corpus sacreBLEU with `tokenize` (None: `zh` for Chinese references, where 13a gave 0, else 13a) and chrF2."""
    if len(hypotheses) != len(references):
        raise AttnlabError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize or ("zh" if mostly_han(references) else "13a"))
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


class _Tokens:
    """rouge-score's tokens in any script. Its default tokenizer keeps only [a-z0-9]: "Mädchen"
    and "Mödchen" were both "m dchen" (ROUGE 100 for words that differ), Russian no tokens at all
    (0 for equal lines) and Chinese too. Words of [a-z0-9] are lower-cased and Porter-stemmed as
    that tokenizer does (English scores are unchanged); words in other letters are kept whole,
    lower-cased; each Han or kana character is a token (text written without spaces)."""

    _WORD = re.compile(f"[\u3040-\u30ff]|{HAN.pattern}|(?:(?![\u3040-\u30ff]|{HAN.pattern})[^\\W_])+")

    def __init__(self) -> None:
        from nltk.stem import porter  # lazy: as rouge_score, which depends on it

        self._stemmer = porter.PorterStemmer()

    def tokenize(self, text: str) -> list[str]:
        words = self._WORD.findall(text.lower())
        return [self._stemmer.stem(w) if len(w) > 3 and re.fullmatch("[a-z0-9]+", w) else w for w in words]


def rouge(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measures (×100, the mean over sentences) with Google's
    `rouge-score`, the implementation summarisation papers report: lower-cased words,
    Porter-stemmed where they are English ([a-z0-9]), Chinese and Japanese by character (`_Tokens`)."""
    if len(hypotheses) != len(references):
        raise AttnlabError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    from rouge_score import rouge_scorer  # lazy: text tasks only; `attnlab train` imports this module

    scorer = rouge_scorer.RougeScorer(list(ROUGE), tokenizer=_Tokens())
    scores = [scorer.score(ref, hyp) for hyp, ref in zip(hypotheses, references, strict=True)]
    return {name: 100 * sum(s[name].fmeasure for s in scores) / max(len(scores), 1) for name in ROUGE}


def _split_compounds(line: str) -> str:
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hypotheses: list[str], references: list[str], tokens: str = "13a") -> float:
    """The paper's style: tokenized (sacreBLEU's 13a tokenizer standing in for Moses; `tokens="zh"`
    splits Chinese into characters, where 13a saw each sentence as one word and scored 0) and
    compounds split at hyphens, then BLEU on the tokens. `force=True`: the text is tokenized on
    purpose, so sacreBLEU's "you forgot to detokenize" warning would be wrong here. The tokenizers
    are imported by name: as `sacrebleu.tokenizers.tokenizer_13a` it existed only once a 13a BLEU
    had loaded it (`--tokenize zh --tokenized` was an AttributeError)."""
    tok = TokenizerZh() if tokens == "zh" else Tokenizer13a()
    hyp = [_split_compounds(tok(h)) for h in hypotheses]
    ref = [_split_compounds(tok(r)) for r in references]
    return sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(hyp, [ref]).score


def cli(argv: list[str]) -> int:
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", help="source lines to decode (- for stdin); with --hyp read by --task parse only")
    parser.add_argument("--ref", help="references (translations, or one tree per line for parsing; - for stdin)")
    parser.add_argument("--hyp", help="score these outputs instead of decoding (for align: Pharaoh links; - for stdin)")
    parser.add_argument(
        "--task",
        choices=["translate", "parse", "align"],
        default=None,
        help="what to score (default: the --checkpoint's task, else translate)",
    )
    add_alignment_arguments(parser)  # --checkpoint (translate/parse --src with it, then score), --input, ...
    parser.add_argument("--gold", help="align: human links, `i-j` sure and `i?j`/`ipj` possible")
    parser.add_argument("--gold-one-indexed", action="store_true", help="align: the gold counts words from 1")
    parser.add_argument("--reverse-gold", action="store_true", help="align: the gold's links are target-source")
    parser.add_argument(
        "--all-heads",
        action="store_true",
        help="align: score every reading of --checkpoint's cross-attention on --input: each head, each layer's "
        "average and all layers', Shift-Att, each layer's rollout (through the encoder), and the direct shares "
        "(direct logit attribution) of each layer and of all, each layer's norm reading (‖Σ_h αf(x)‖), and the "
        "gradient saliency (|gradient × input|)",
    )
    parser.add_argument(
        "--save-best",
        action="store_true",
        help="align --all-heads: name the best reading in the checkpoint's meta (a run directory's: its newest "
        "valid checkpoint's); `attnlab align` then uses it",
    )
    add_search_arguments(parser, lengths=False)
    parser.add_argument(
        "--tokenize",
        choices=TOKENIZERS,
        help="sacreBLEU's tokenizer (default: from the checkpoint's target language, zh for Chinese, else 13a)",
    )
    parser.add_argument("--tokenized", action="store_true", help="also print the paper-style tokenized BLEU")
    parser.add_argument(
        "--metric",
        action="append",
        choices=["bleu", "rouge"],
        help="bleu: sacreBLEU and chrF (the default); rouge: ROUGE-1/2/L (repeat the flag for both)",
    )
    parser.add_argument(
        "--truncate", action="store_true", help="cut --src lines longer than the model takes (default: refuse them)"
    )
    parser.add_argument("--out", help="also write the outputs here")
    parser.add_argument(
        "--json",
        action="store_true",
        help="JSON instead of lines: BLEU, chrF and F1 out of 100 as printed; AER, precision and recall of "
        "alignments as fractions (0.25 where the table prints 25.0; precision null for no links at all)",
    )
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    inputs = {f"--{name}": getattr(args, name) for name in ("src", "ref", "hyp", "input", "gold")}
    out = check_out(args.out, inputs=inputs) if args.out else None  # before the decoding, which can take hours
    one_stdin(inputs)
    refuse_unused(args)
    if args.task == "align":
        return evaluate_alignment(args)
    if not args.ref:
        raise AttnlabError("give --ref (the references to score against)")
    refs = read_input(args.ref)
    if all(is_blank(line) for line in refs):  # blank ones scored BLEU 0.00 against ref_len 0, exit 0
        raise AttnlabError(f"{args.ref}: no lines to score" + (" (every line is empty)" if refs else ""))
    refuse_blank(refs, args.ref, "a reference to score against")  # one was scored as an empty reference
    outputs = read_input(args.hyp) if args.hyp else None
    tgt_lang, meta = None, {}
    if outputs is not None:
        task = args.task or "translate"
        if args.checkpoint:  # not decoded, but it names the target language and the task
            _, task, tgt_lang, meta = opened(args, refs, None)  # found as decoding finds it: a run's newest, Marian's
        elif args.task is None and all_trees([*refs, *outputs]):  # a guess: trees scored BLEU 100 as translations
            raise AttnlabError(
                f"every line of {args.hyp} and {args.ref} is a bracketed tree: give --task parse for bracket F1 "
                "(or --task translate to score them as text)"
            )
        if args.src and task != "parse":  # it was read, its lines counted, and the outputs scored without it
            raise AttnlabError(
                "--src is read with --hyp only to score parses (the words of linearised trees); "
                f"{task} outputs are scored against --ref alone: drop --src"
            )
    sources = read_input(args.src) if args.src else None
    for name, lines in ((args.src, sources), (args.hyp, outputs)):
        if lines is not None and len(lines) != len(refs):
            raise AttnlabError(f"{name} has {len(lines)} lines but {args.ref} has {len(refs)}")
    if outputs is None:
        if not (args.checkpoint and sources is not None):
            raise AttnlabError("give --checkpoint and --src to decode, or --hyp with outputs to score")
        refuse_blank(sources, args.src, "a sentence to score")
        keep_freed_memory()  # this command owns its process: no page faults on each step's logits
        model, task, tgt_lang, meta = opened(args, refs, sources)
        cut = fit_lines(model, sources, None, (args.src, ""), args.truncate)  # a BLEU of cut sources, said or refused
        if cut:
            warnings.warn(cut_notice(cut, len(sources), model), stacklevel=1)
        search = {"beam": args.beam, "alpha": args.alpha, "patience": args.patience}
        outputs = [r.text for r in model.translate(sources, **search, truncate=args.truncate)]
    if out:
        write_out(out, "".join(o + "\n" for o in outputs))
    if task == "parse":
        report = parse_report(refs, outputs, sources, args.ref, args.hyp or "the parses")
        print(json.dumps(report) if args.json else parse_line(report, len(refs)))
        return 0
    metrics = args.metric or ["bleu"]
    if tgt_lang is None and mostly_han(refs):  # no checkpoint names the language: the text does
        tgt_lang = "zh"
        print("attnlab evaluate: the references are Chinese: BLEU tokenized as zh, ROUGE by character", file=sys.stderr)
    if hint := script_hint(meta, tgt_lang, refs, args.ref):  # scored as given, but not without a word
        warnings.warn(hint, stacklevel=1)
    tokenize = args.tokenize or bleu_tokenize(tgt_lang)
    report = bleu_chrf(outputs, refs, tokenize) if "bleu" in metrics else {}
    tokens = bleu_tokenize(tgt_lang)  # the paper-style BLEU's, by the language (not --tokenize)
    if args.tokenized:
        report["tokenized_bleu"] = tokenized_bleu(outputs, refs, tokens)
    if "rouge" in metrics:
        report.update(rouge(outputs, refs))
    if args.json:
        print(json.dumps(report))
        return 0
    if "bleu" in metrics:
        print(f"BLEU = {report['bleu']:.2f}  {report['bleu_signature']}")
        print(f"chrF2 = {report['chrf']:.2f}  {report['chrf_signature']}")
        print(report["bleu_detail"], file=sys.stderr)
    if args.tokenized:
        print(
            f"tokenized BLEU (paper-style, {tokens} tokens + compound splitting; NOT sacreBLEU) = {report['tokenized_bleu']:.2f}"
        )
    if "rouge" in metrics:
        print(
            " ".join(f"{name.upper().replace('ROUGE', 'ROUGE-')} = {report[name]:.2f}" for name in ROUGE)
            + "  (rouge-score F1, English words stemmed)"
        )
    return 0


def all_trees(lines: list[str]) -> bool:
    """Whether every line that is not blank (a failed parse) is a bracketed tree: a Penn tree (a
    `(TAG word)` in it) or a linearised target (`)NP`); "(Applause)" is none."""
    shown = [line.strip() for line in lines if line.strip()]
    return bool(shown) and all(t.startswith("(") and (TREE.search(t) or LINEARISED.search(t)) for t in shown)


def parse_report(
    refs: list[str], outputs: list[str], sources: list[str] | None, ref_name: str, hyp_name: str
) -> dict[str, Any]:
    """Bracket F1 of the parses against the references: Penn trees, or prepared linearised
    targets rebuilt over the words of `sources`. An empty output line is a failed parse (what
    `attnlab parse` writes for an input it could not take): scored as no brackets and counted in
    `failed`, since dropping it would flatter F1 and refusing the file would score nothing.
    Anything else that is not a tree is an error naming FILE:LINE, and so is a file where no
    sentence can be scored (every one skipped: its words differ from the reference's)."""
    gold: list[Tree] = []
    predicted: list[Tree] = []
    for number, (ref, output) in enumerate(zip(refs, outputs, strict=True), 1):
        where = f"{ref_name}:{number}"
        if LINEARISED.search(ref):
            if sources is None:
                raise AttnlabError(f"{where}: a linearised tree (as `data prepare ptb` writes) needs --src, its words")
            gold.append(delinearize(ref.split(), sources[number - 1].split(), is_spelled(ref)))
        else:
            gold.append(parse_tree(ref, where))
        predicted.append(parse_tree(output, f"{hyp_name}:{number}") if output.strip() else flat(gold[-1]))
    report = {**bracket_f1(gold, predicted), "failed": sum(not output.strip() for output in outputs)}
    if not report["sentences"]:  # it printed F1 0.00 "(0 of 3 sentences scored, 3 skipped ...)", exit 0
        raise AttnlabError(f"{hyp_name}: no sentence to score: the words of each differ from its tree's in {ref_name}")
    return report


def parse_line(report: dict[str, Any], total: int) -> str:
    """The human line of `parse_report`: F1 and how many sentences it covers."""
    covered = f"{report['sentences']} of {total} sentences scored"
    if report["skipped"]:
        covered += f", {report['skipped']} skipped: their words differ from the reference's"
    if report["failed"]:
        covered += f"; failed parses (empty lines) scored as no brackets: {report['failed']}"
    return (
        f"labelled brackets (EVALB conventions: punctuation and root ignored): "
        f"P {report['precision']:.2f}  R {report['recall']:.2f}  F1 {report['f1']:.2f}  ({covered})"
    )


def evaluate_alignment(args: argparse.Namespace) -> int:
    """`--task align`: corpus AER of --hyp links against --gold, or with --all-heads of every
    reading of --checkpoint's cross-attention on --input, as a markdown table sorted by AER.
    Given --input, every gold and --hyp link is checked against the words of its pair (a --hyp
    link past its pair was scored, as a wrong link, where the same gold link was refused)."""
    if not args.gold:
        raise AttnlabError("--task align needs --gold (human links)")
    lines = read_input(args.input) if args.input else None
    lengths = [word_counts(line) for line in lines] if lines is not None else None
    gold = read_pharaoh(
        read_input(args.gold),
        one_indexed=args.gold_one_indexed,
        reverse=args.reverse_gold,
        lengths=lengths,
        name=args.gold,
    )
    sures, possibles = [s for s, _ in gold], [p for _, p in gold]
    if not any(sures):  # AER, precision and recall of nothing read 0.00, 100 and 100
        raise AttnlabError(
            f"{args.gold}: " + ("no sure links: AER is undefined without them" if gold else "no lines to score")
        )
    if not args.gold_one_indexed and (hint := one_indexed_hint(gold, args.gold)):  # a hint, not proof: scored
        warnings.warn(hint, stacklevel=1)
    if not args.all_heads:
        if not args.hyp:
            raise AttnlabError("give --hyp (links to score), or --all-heads --checkpoint CKPT --input PAIRS")
        said = "--hyp links count words from 0, source word first, as `attnlab align` writes them"
        read = read_pharaoh(read_input(args.hyp), lengths=lengths, name=args.hyp, from_one=said, swapped=said)
        hyps = [possible for _, possible in read]
        if hint := one_indexed_hint(read, args.hyp, said):  # (scored: a hint, not proof)
            warnings.warn(hint, stacklevel=1)
        if len(hyps) != len(sures):  # (it said "2 hypothesis, 3 sure and 3 possible lines", no file named)
            raise AttnlabError(f"--hyp {args.hyp} has {len(hyps)} lines and --gold {args.gold} {len(sures)}")
        report = corpus_aer(hyps, sures, possibles)
        if args.json:
            print(json.dumps(report))
        else:
            print(
                f"AER = {100 * report['aer']:.2f}  precision {percent(report['precision'], 2)}  "
                f"recall {100 * report['recall']:.2f}  ({report['sentences']} sentences, %)"
            )
        return 0
    if not (args.checkpoint and lines is not None):
        raise AttnlabError("--all-heads needs --checkpoint and --input (the `source ||| target` pairs)")
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    target = save_best_target(args.checkpoint, model) if args.save_best else None  # before minutes of scoring
    links, threshold = link_rule(args)
    rows, failed = aer_grid(model, lines, sures, possibles, args.reverse_input, links, threshold, args.samples or 0)
    if len(failed) == len(lines):  # every row was AER 100, exit 0 (tab-separated pairs)
        raise AttnlabError(f"{args.input}: no line is a pair the model can read (line {failed[0][0]}: {failed[0][1]})")
    for number, reason in failed:
        print(f"attnlab evaluate: line {number}: {reason}; scored as no links", file=sys.stderr)
    if target is not None and failed:  # a reading chosen on lines scored as no links would replace the card's
        print(
            f"attnlab evaluate: --save-best: {len(failed)} of {len(lines)} lines not read; nothing written",
            file=sys.stderr,
        )
        target = None
    if target is not None:
        best = {k: v for k, v in rows[0].items() if k in SAVED}
        rule = {"links": links, **({"threshold": threshold} if links == "threshold" else {})}  # `align` reads with it
        update_meta(target, alignment={**best, **rule, "gold": Path(args.gold).name, "pairs": len(lines)})
        said = f"{rows[0]['reading']}, {links} links" + (f" at {threshold:g}" if links == "threshold" else "")
        print(  # the one command that writes into a model: it says which files, where
            f"attnlab evaluate: --save-best: wrote {said} as the default alignment reading into "
            f"{target / 'config.json'} (meta.alignment) and {target / MANIFEST}; `attnlab align` now uses it",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(rows))
        return 1 if failed else 0
    print(f"| reading | AER | precision | recall |  ({len(lines)} pairs, {links} links, %)")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['reading']} | {100 * row['aer']:.1f} | {percent(row['precision'], 1)} | {100 * row['recall']:.1f} |"
        )
    diagonal = corpus_aer([diagonal_links(line) for line in lines], sures, possibles)
    print(
        f"\nno model, each target word linked to the source word at the same relative position: AER {100 * diagonal['aer']:.1f}"
    )
    return 1 if failed else 0  # as `align`: a line scored as no links is said, and the status says so


SAVED = ("method", "layer", "head", "samples", "aer", "precision", "recall")  # a best reading, into the card


def percent(fraction: float | None, digits: int) -> str:
    """A fraction as a percentage; None, the precision of no links at all (0/0), as undefined:
    it printed "precision 100.00" for an aligner that linked nothing."""
    return "n/a (no links)" if fraction is None else f"{100 * fraction:.{digits}f}"
