"""`attnlab heads`: what every head does, and which ones the model needs, over a whole corpus.

    attnlab heads profile --checkpoint C --src test2016.en --out p.parquet   # per-head statistics
    attnlab heads query p.parquet "SELECT kind, avg(entropy) FROM profile GROUP BY kind"
    attnlab heads importance --checkpoint C --src valid.en --tgt valid.de \
        --prune-src test2016.en --prune-ref test2016.de                    # Michel et al. (2019)
    attnlab heads patch --checkpoint C --clean "A man sleeps." --corrupted "A woman sleeps."

The work is done in `attnlab.decode.profile`, `.importance` and `.patching`; this module reads
the flags and the files, and writes the answers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from attnlab.decode.commands import add_checkpoint_argument, add_dtype_argument, add_search_arguments, search_settings
from attnlab.decode.heads_patch import patch_command, patch_parser
from attnlab.decode.importance import head_importance, pruning_curve
from attnlab.decode.loading import load
from attnlab.decode.profile import profile, query, write_profile
from attnlab.decode.search import check_settings
from attnlab.decode.streams import check_out, one_stdin, read_input, write_stdout
from attnlab.errors import ArgumentParser, AttnlabError, ConfigError
from attnlab.model.checkpoint import weights_digest
from attnlab.model.cpu import set_threads
from attnlab.record.importance import HeadImportance
from attnlab.record.trace import KINDS

SUBCOMMANDS = ("profile", "query", "importance", "patch")  # `attnlab heads X`, as the CLI's lines name them


def cli_heads(argv: list[str]) -> int:
    """`attnlab heads profile ...`, `attnlab heads query PROFILE SQL`, `attnlab heads importance ...`
    and `attnlab heads patch ...`."""
    parser = ArgumentParser(
        allow_abbrev=False,
        prog="attnlab heads",
        description="Head statistics over a whole corpus, and which heads the model needs.",
    )
    commands = parser.add_subparsers(dest="action", required=True)
    run = commands.add_parser(
        "profile",
        allow_abbrev=False,
        help="record a test set; per-sentence, per-head statistics as Parquet",
        description="Decode (or, with --tgt, read teacher-forced) every sentence of --src with its attention "
        "recorded, and write each head's statistics for each sentence (entropy, where it looks; with --gold "
        "its AER, with --importance and --direct its share of the output) to a Parquet file for `heads query`.",
    )
    add_checkpoint_argument(run)
    run.add_argument("--src", required=True, help="one source sentence per line (- for stdin)")
    run.add_argument("--tgt", help="references, read teacher-forced (default: the model's own translations)")
    run.add_argument("--gold", help="gold links of the --tgt references (Pharaoh i-j / i?j lines): AER per head")
    run.add_argument("--gold-one-indexed", action="store_true", help="the gold links count words from 1")
    run.add_argument(
        "--reverse-gold",
        action="store_true",
        help="the gold's links are target-source (i: a --tgt word, j: a --src word), as `evaluate --task align "
        "--reverse-gold` reads them: e.g. the shared zh-en gold (alignment/zhen_dev.gold) with an en→zh model",
    )
    run.add_argument(
        "--out", required=True, help="the profile file to write: NAME.parquet (Parquet, for `heads query`)"
    )
    add_search_arguments(run, lengths=False, patience=False)
    run.add_argument("--batch", type=int, default=64, help="sentences decoded together (default 64)")
    run.add_argument("--limit", type=int, help="only the first N sentences")
    add_dtype_argument(run)
    run.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: beside a training run on 2 shared cores, 2 threads were 13x slower)",
    )
    run.add_argument(
        "--truncate",
        action="store_true",
        help="cut lines longer than the model takes, saying how many (default: refuse them, naming the line)",
    )
    run.add_argument(
        "--importance",
        action="store_true",
        help="also each head's importance for each sentence's output: |d log P / d gate| (Michel et al., 2019)",
    )
    run.add_argument(
        "--direct",
        action="store_true",
        help="also each decoder head's direct share of the output's logits (direct logit attribution; the mean "
        "over the sentence's pieces, against the mean logit)",
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    ask = commands.add_parser(
        "query",
        allow_abbrev=False,
        help="run SQL (DuckDB) over a profile, which is called `profile`",
        description="Run one SQL query (DuckDB) over a profile written by `attnlab heads profile`, the table "
        "named `profile`, and print the rows tab-separated (floats whole; a tab, line break or backslash in "
        "text as \\t, \\n, \\\\).",
    )
    ask.add_argument("profile", help="a profile written by `attnlab heads profile` (.parquet)")
    ask.add_argument("sql", help='the query, e.g. "SELECT kind, avg(entropy) FROM profile GROUP BY kind"')
    _importance_parser(commands)
    patch_parser(commands)
    args = parser.parse_args(argv)
    if args.action == "importance":
        return _importance(args)
    if args.action == "patch":
        return patch_command(args)
    if args.action == "query":
        names, rows = query(args.profile, args.sql)
        write_stdout("".join("\t".join(map(_cell, row)) + "\n" for row in [names, *rows]))
        return 0
    for name in ("batch", "limit"):  # --limit -1 dropped the last sentence, --batch 0 a ValueError
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} must be ≥ 1, got {value}")
    set_threads(args.threads)  # (--threads 100000 was a segmentation fault once the model was loaded)
    for flag, given in (("--reverse-gold", args.reverse_gold), ("--gold-one-indexed", args.gold_one_indexed)):
        if given and not args.gold:  # (--gold-one-indexed alone was read by nothing, without a word)
            raise AttnlabError(f"{flag} reads --gold: give the gold links too")
    if args.tgt and (args.beam is not None or args.alpha is not None):  # else ignored, as if searched so
        raise AttnlabError("--beam and --alpha set the search, and with --tgt the references are read, not searched")
    inputs = {"--src": args.src, "--tgt": args.tgt, "--gold": args.gold}
    out = check_out(args.out, inputs=inputs)  # before minutes of decoding; os.replace onto a directory failed last
    if out.suffix.lower() != ".parquet":  # `--out x.csv` was Parquet under a .csv name, exit 0
        raise AttnlabError(f"--out {out}: a profile is a Parquet file; name it NAME.parquet")
    one_stdin(inputs)
    sources = read_input(args.src)[: args.limit]
    if not sources:  # a profile of no sentences was written, exit 0
        raise AttnlabError(f"{args.src}: no lines to profile")
    targets = read_input(args.tgt)[: args.limit] if args.tgt else None
    gold = read_input(args.gold)[: args.limit] if args.gold else None
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    settings = search_settings(model.task, args.beam, args.alpha)  # the model's task's, unless given
    started = time.perf_counter()
    table = profile(
        model,
        sources,
        targets,
        gold,
        one_indexed=args.gold_one_indexed,
        reverse_gold=args.reverse_gold,
        gold_name=args.gold or "gold",
        names=(args.src, args.tgt or ""),
        truncate=args.truncate,
        beam=settings["beam"],
        alpha=settings["alpha"],
        batch=args.batch,
        importance=args.importance,
        direct=args.direct,
        progress=not args.quiet,
    )
    about = {
        "checkpoint": os.path.basename(os.path.normpath(args.checkpoint)),
        "model_sha256": weights_digest(model.path),
        "mode": "reference" if targets is not None else "translate",
        "beam": settings["beam"] if targets is None else None,  # references are read, not searched
        "alpha": settings["alpha"] if targets is None else None,
        "src": os.path.basename(args.src),
        "gold": os.path.basename(args.gold) if args.gold else None,
        "reverse_gold": args.reverse_gold,
        "sentences": len(sources),
    }
    path = write_profile(table, out, about)
    seconds = time.perf_counter() - started
    print(f"{path}: {table.num_rows:,} rows ({len(sources):,} sentences) in {seconds:.1f} s", file=sys.stderr)
    return 0


def _cell(value: object) -> str:
    """One value of a `query` row as a tab-separated cell: a float whole (its shortest exact form;
    4 significant digits turned a sum of 123456.789 into 1.235e+05), NULL empty, and a tab, line
    break or backslash in text escaped (\\t, \\n, \\\\): a source line holding a tab gave its row a column more."""
    if value is None:
        return ""
    text = repr(value) if isinstance(value, float) else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


# -- importance ------------------------------------------------------------------------------------------------
def _importance_parser(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "importance",
        allow_abbrev=False,
        help="every head's importance (Michel et al., 2019), and the test score as heads are pruned",
        description="Every head's importance: E |d log P(y|x) / d gate| over the sentence pairs (--exact: also the "
        "log-likelihood lost with the head alone switched off); with --prune-src/--prune-ref, the test score "
        "(BLEU, or bracket F1 for a parser) as heads are switched off, least important first.",
    )
    add_checkpoint_argument(run)
    run.add_argument("--src", required=True, help="source sentences to weigh the heads on, one per line (- for stdin)")
    run.add_argument("--tgt", help="their references, read teacher-forced (default: the model's own outputs)")
    run.add_argument("--limit", type=int, help="only the first N sentences of --src")
    run.add_argument("--exact", action="store_true", help="also switch each head off and measure the loss (slower)")
    run.add_argument(
        "--order-by",
        choices=("gradient", "ablation"),
        default="gradient",
        help="the pruning order (default: gradient; ablation needs --exact)",
    )
    run.add_argument(
        "--across-layers",
        action="store_true",
        help="order heads by their scores as measured, not normalised per layer as Michel et al. do "
        "(keeps more BLEU once most heads are off: docs/EXPERIMENTS.md)",
    )
    run.add_argument("--prune-src", help="a test set's sources, decoded as heads are switched off")
    run.add_argument("--prune-ref", help="its references")
    run.add_argument("--prune-every", type=int, help="heads switched off between two decodes (default: a tenth)")
    add_search_arguments(run, lengths=False, patience=False)
    add_dtype_argument(run)
    run.add_argument("--truncate", action="store_true", help="cut lines longer than the model takes")
    run.add_argument("--json", action="store_true", help="one JSON object on stdout instead of tables")


def _importance(args: argparse.Namespace) -> int:
    """`attnlab heads importance`: read, weigh, prune, print."""
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be ≥ 1, got {args.limit}")
    if args.prune_every is not None and args.prune_every < 1:
        raise ConfigError(f"--prune-every must be ≥ 1, got {args.prune_every}")
    if (args.prune_src is None) != (args.prune_ref is None):
        raise AttnlabError("--prune-src and --prune-ref go together: the test set's sources and its references")
    if args.order_by == "ablation" and not args.exact:
        raise AttnlabError("--order-by ablation needs --exact, which measures it")
    pruning = (args.beam, args.alpha, args.prune_every) != (None, None, None) or args.across_layers
    if args.prune_src is None and pruning:
        raise AttnlabError(
            "--beam, --alpha, --prune-every and --across-layers set the pruning: give --prune-src and --prune-ref"
        )
    inputs = {"--src": args.src, "--tgt": args.tgt, "--prune-src": args.prune_src, "--prune-ref": args.prune_ref}
    one_stdin(inputs)
    sources = read_input(args.src)[: args.limit]
    references = read_input(args.tgt)[: args.limit] if args.tgt else None
    if not sources:
        raise AttnlabError(f"{args.src}: no sentences to weigh the heads on")
    if references is not None and len(references) != len(sources):
        raise AttnlabError(f"{args.src} has {len(sources)} lines but {args.tgt} {len(references)}")
    tests = [read_input(args.prune_src), read_input(args.prune_ref)] if args.prune_src else None
    if tests is not None and (len(tests[0]) != len(tests[1]) or not tests[0]):
        raise AttnlabError(f"{args.prune_src} has {len(tests[0])} lines and {args.prune_ref} {len(tests[1])}")
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    settings = search_settings(model.task, args.beam, args.alpha)
    if tests is not None:  # before the importance pass (minutes): --beam 0 was refused only after it
        check_settings(**settings, n_best=None)
        heads = len(KINDS) * model.config.n_layers * model.config.n_heads  # every kind's
        if args.prune_every is not None and args.prune_every >= heads:  # the curve was its "0 off" point alone
            raise ConfigError(
                f"--prune-every {args.prune_every} ≥ the model's {heads} heads: the curve would hold 0 off only"
            )
    started = time.perf_counter()
    importance = head_importance(model, sources, references, exact=args.exact, truncate=args.truncate)
    seconds = time.perf_counter() - started
    print(
        f"{importance.sentences:,} sentences, {importance.tokens:,} pieces weighed in {seconds:.1f} s", file=sys.stderr
    )
    curve = []
    if tests is not None:
        total = importance.gradient.size
        every = args.prune_every or max(1, total // 10)
        order = importance.order(args.order_by, per_layer=not args.across_layers)
        for off in range(0, total, every):  # a test set decoded per step: minutes, so each is said when done
            curve += pruning_curve(model, order, *tests, [off], truncate=args.truncate, **settings)
            score = f"F1 {curve[-1]['f1']:.2f}" if "f1" in curve[-1] else f"BLEU {curve[-1]['bleu']:.2f}"
            print(f"{off} of {total} heads off: {score} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    write_stdout(_json(importance, curve, args, model.path) if args.json else _tables(importance, curve))
    return 0


def _json(importance: HeadImportance, curve: list[dict], args: argparse.Namespace, path: str) -> str:
    about = {
        "checkpoint": os.path.basename(os.path.normpath(args.checkpoint)),
        "model_sha256": weights_digest(path),
        "sentences": importance.sentences,
        "pieces": importance.tokens,
        "references": "given" if args.tgt else "the model's own outputs",
        "order_by": args.order_by,
        "per_layer": not args.across_layers,
    }
    return json.dumps({**about, "heads": importance.rows(), "pruning": curve}, ensure_ascii=False) + "\n"


def _tables(importance: HeadImportance, curve: list[dict]) -> str:
    """Heads most important first, then the pruning curve (with sacreBLEU's signature)."""
    rows = sorted(importance.rows(), key=lambda r: -r["normalized"])
    lines = ["kind\tlayer\thead\tgradient\tnormalized\tablation"]
    for r in rows:
        ablation = "" if r["ablation"] is None else f"{r['ablation']:.4f}"
        lines.append(f"{r['kind']}\t{r['layer']}\t{r['head']}\t{r['gradient']:.4f}\t{r['normalized']:.3f}\t{ablation}")
    if curve:
        score = "f1" if "f1" in curve[0] else "bleu"
        lines += ["", f"off\tshare\t{'F1' if score == 'f1' else 'BLEU'}" + ("" if score == "f1" else "\tchrF")]
        for row in curve:
            extra = "" if score == "f1" else f"\t{row['chrf']:.2f}"
            lines.append(f"{row['off']}\t{row['share']:.0%}\t{row[score]:.2f}{extra}")
        if score == "bleu":
            lines.append(f"# {curve[0]['bleu_signature']}")
    return "\n".join(lines) + "\n"
