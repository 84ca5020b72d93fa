"""`attnlab translate`, `attnlab parse` and `attnlab record`, and the options every decoding command
shares (`attnlab align` is `align_command`'s): one output line per input line; a line the model
cannot take is reported on stderr and left empty, the rest are decoded (`record` instead refuses
the run, naming the line). Output files are checked (`check_out`) before any decoding, and a
stdout that cannot be written is one line.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from attnlab.data.corpora import decode_lines, invalid_lines
from attnlab.data.tokenizer import as_read, is_blank, read_as_bytes, shown_characters, unknown_characters
from attnlab.decode.api import DEFAULTS, Model
from attnlab.decode.loading import DTYPES, load
from attnlab.decode.search import check_settings
from attnlab.decode.streams import model_directory, one_stdin, read_input, terminal_stdin, write_stdout
from attnlab.errors import ArgumentParser, AttnlabError, ModelInputError
from attnlab.model.memory import keep_freed_memory

_RECORDED = re.compile(r"\d{5,}\.trace")  # the names `record` gives its traces: 00000.trace, ...
EXIT_STATUS = (  # so that a pipeline learns a line failed: with every line failed, the status was 0
    "exit status: 0 when every line is answered; 1 when a line could not be (its output line is left empty "
    "and stderr names it); 2 when the command refuses to run."
)


def add_checkpoint_argument(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--checkpoint, which every decoding command reads its model from (`attnlab.load`)."""
    parser.add_argument(
        "--checkpoint",
        required=required,
        metavar="DIR",
        help="the model: a checkpoint directory (e.g. checkpoints/multi30k-en-de, RUN/checkpoints/step_N, an "
        "average), a run directory (its newest checkpoint), or a Hugging Face Marian / OPUS-MT directory",
    )


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """--dtype with no default of its own (None means fp32), so that a command that decodes
    nothing (`evaluate --hyp`) can tell that it was given and refuse it."""
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        help="default fp32 (exact attention maps); bf16: about 1.5× faster decoding on CPUs with bf16 "
        "instructions; int8: int8 linear layers, CPU only (docs/BENCHMARKS.md)",
    )


def add_search_arguments(parser: argparse.ArgumentParser, lengths: bool = True, patience: bool = True) -> None:
    """--beam, --alpha (with `lengths` --max-len-a/-b, with `patience` --patience), all None unless
    given: the defaults are the model's task's (`search_settings`), known only once the checkpoint is read."""
    t, p = DEFAULTS["translate"], DEFAULTS["parse"]
    task = "default: the model's task's"
    parser.add_argument(
        "--beam", type=int, help=f"beam size ({task}: {t['beam']} for translation, §6.1; {p['beam']} for parsing, §6.3)"
    )
    parser.add_argument(
        "--alpha",
        type=float,
        help=f"length penalty α ({task}: {t['alpha']} for translation, §6.1; {p['alpha']} for parsing, §6.3)",
    )
    if lengths:
        parser.add_argument(
            "--max-len-a", type=float, help="longest output: a × input length + b pieces (default a = 1 for every task)"
        )
        parser.add_argument(
            "--max-len-b",
            type=int,
            help=f"longest output: a × input length + b pieces ({task}: b = {t['max_len_b']} for translation, "
            f"§6.1; {p['max_len_b']} for parsing, §6.3)",
        )
    if patience:
        parser.add_argument(
            "--patience",
            type=float,
            help="also stop a sentence once patience × beam hypotheses have ended (1: fairseq's stop, faster; "
            "default: the paper's, once no live hypothesis can still win)",
        )


def search_settings(
    task: str,
    beam: int | None = None,
    alpha: float | None = None,
    max_len_a: float | None = None,
    max_len_b: int | None = None,
    patience: float | None = None,
) -> dict[str, float | int | None]:
    """The search settings a command decodes with: those given, else the model's `task`'s (§6.1
    for translation, §6.3 for parsing). Translation's, hard-wired as flag defaults, decoded a
    parser with beam 4 and α 0.6: F1 65.4 instead of 73.1 on 30 WSJ sentences, with no warning."""
    defaults = DEFAULTS.get(task, DEFAULTS["translate"])
    return {
        "beam": defaults["beam"] if beam is None else beam,
        "alpha": defaults["alpha"] if alpha is None else alpha,
        "max_len_a": 1.0 if max_len_a is None else max_len_a,
        "max_len_b": defaults["max_len_b"] if max_len_b is None else max_len_b,
        "patience": patience,
    }


def fit_lines(
    model: Model, sources: list[str], targets: list[str] | None, names: tuple[str, str], truncate: bool
) -> list[int]:
    """The numbers (from 1) of the lines `truncate` cuts to the length the model takes; without
    it the first line too long is refused, naming FILE:LINE as `record` does, before any decoding.
    `heads profile` and `evaluate` once cut such lines silently: statistics and BLEU of the first
    1023 pieces of a 1500-piece line, exit 0, not a word said. `names`: the sources' and targets'."""
    cut = []
    for number, source in enumerate(sources, 1):
        side = 0
        try:
            was_cut = model.encode_source(source, truncate)[1]
            side = 1
            if targets is not None:  # (a parser's reference is a tree: one that does not parse is named too)
                was_cut |= model.encode_target(targets[number - 1], truncate)[1]
        except AttnlabError as error:
            raise ModelInputError(f"{names[side]}:{number}: {error}") from None
        if was_cut:
            cut.append(number)
    return cut


def was_cut(model: Model, line: str) -> bool:
    """Whether `truncate` cuts `line`; a line the model cannot take at all is said where it fails."""
    try:
        return model.encode_source(line, True)[1]
    except AttnlabError:
        return False


def cut_notice(cut: list[int], total: int, model: Model) -> str:
    """What `truncate` did to the lines `fit_lines` numbers, in a line for stderr."""
    room = model.config.max_len - 1
    return f"{len(cut)} of {total} lines cut to the {room} pieces this model takes (the first: line {cut[0]})"


def empty_notice(command: str, empty: list[int], total: int, written: str = "line") -> str:
    """The line for stderr saying which input lines (`empty`, numbered from 1) were empty and were
    answered with an empty `written`: one line for them all (100,000 empty lines printed 100,000)."""
    if len(empty) == 1:
        return f"attnlab {command}: line {empty[0]} is empty; writing an empty {written}"
    return f"attnlab {command}: {len(empty)} of {total} lines are empty (the first: line {empty[0]}); writing an empty {written} for each"


def unknown_notice(model: Model, lines: dict[int, str], task: str) -> str:
    """A line for stderr naming the characters of `lines` ({number: line}) the model's vocabulary
    lacks (it reads them as UTF-8 byte pieces it hardly saw in training), as the explorer's notice
    does: Chinese given to the EN→DE model came back as German-looking nonsense without a word.
    "" when none."""
    missing = unknown_characters(model.tokenizer, "\n".join(lines.values()))
    if not missing:
        return ""
    first = next(n for n, line in lines.items() if not set(missing).isdisjoint(as_read(line)))
    shown = shown_characters(missing)
    count = "1 character is" if len(missing) == 1 else f"{len(missing)} characters are"
    read = "UTF-8 byte pieces" if read_as_bytes(model.tokenizer, missing[0]) else "<unk>"
    return f"attnlab {task}: {count} not in this model's vocabulary, read as {read} (first on line {first}): {shown}"


def _decode_cli(argv: list[str], task: str) -> int:
    parser = ArgumentParser(
        allow_abbrev=False,
        prog=f"attnlab {task}",
        description=f"{task.capitalize()} lines (one output line per input line)."
        + (
            " A line is read as the Penn Treebank's words: running text is cut so (`loudly.` as `loudly .`)."
            * (task == "parse")
        ),
        epilog=f"{EXIT_STATUS} An empty input line is answered with an empty line.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--input", "-i", default="-", help="file with one sentence per line (default: stdin)")
    add_search_arguments(parser)
    parser.add_argument("--truncate", action="store_true", help="cut over-long inputs instead of failing them")
    if task == "parse":
        parser.add_argument(
            "--plain",
            action="store_true",
            help="§6.3's plain beam search: no constraint to trees of the input's words, no reranking",
        )
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    keep_freed_memory()  # this command owns its process: no page faults on each step's logits
    model = load(args.checkpoint, dtype=args.dtype or "fp32")
    if task == "parse" and model.task != "parse":
        raise AttnlabError(f"{args.checkpoint} is a {model.task} model, not a parser")
    if task == "translate" and model.task == "parse":  # refused rather than guessed: the command names the task
        raise AttnlabError(f"{args.checkpoint} is a parse model: use attnlab parse")
    settings = search_settings(model.task, args.beam, args.alpha, args.max_len_a, args.max_len_b, args.patience)
    check_settings(**settings, n_best=None, vocab=model.config.target_vocab)  # (an empty input took --alpha -1)
    settings |= {"constrained": not args.plain} if task == "parse" else {}
    if args.input == "-" and terminal_stdin():
        return _interactive(model, task, settings, args.truncate)
    lines = read_input(args.input, keep_invalid=True)  # a line that is not UTF-8 fails alone
    start = time.time()
    answered, failed = _answer(model, task, lines, settings, args.truncate)
    print(f"attnlab {task}: {answered} of {len(lines)} lines in {time.time() - start:.1f}s", file=sys.stderr)
    return 1 if failed else 0


def _answer(
    model: Model, task: str, lines: list[str], settings: dict[str, Any], truncate: bool, first: int = 1
) -> tuple[int, int]:
    """Decode `lines` and write one output line each, in one batch; a line that is not text, is
    empty, or that the model cannot take is answered with an empty line and said on stderr by its
    number (counted from `first`). Returns (lines decoded, lines that could not be)."""
    invalid = {number + first - 1: said for number, said in invalid_lines(lines).items()}
    for number, said in invalid.items():
        print(f"attnlab {task}: line {number}: {said}; writing an empty line", file=sys.stderr)
    # (a blank line fails the whole batch; a line that is not UTF-8 is answered empty, as said above)
    good = [i for i, line in enumerate(lines) if i + first not in invalid and not is_blank(line)]
    if notice := unknown_notice(model, {i + first: lines[i] for i in good}, task):
        print(notice, file=sys.stderr)
    if truncate and (cut := [i + first for i in good if was_cut(model, lines[i])]):  # (it cut without a word)
        warnings.warn(cut_notice(cut, len(lines), model), stacklevel=1)
    outputs = [""] * len(lines)
    failed = 0
    if good:
        try:
            results = model.translate([lines[i] for i in good], **settings, truncate=truncate)
            for i, result in zip(good, results, strict=True):
                outputs[i] = result.text
        except ModelInputError:  # find the offending lines, decode the rest
            for i in good:
                try:
                    outputs[i] = model.translate(lines[i], **settings, truncate=truncate).text
                except ModelInputError as error:
                    failed += 1
                    print(f"attnlab {task}: line {i + first}: {error}; writing an empty line", file=sys.stderr)
    if empty := [i + first for i, line in enumerate(lines) if is_blank(line) and i + first not in invalid]:
        print(empty_notice(task, empty, len(lines)), file=sys.stderr)  # (a NUL alone is named once, as not text)
    write_stdout("".join(out + "\n" for out in outputs))
    return len(good) - failed, failed + len(invalid)


def _interactive(model: Model, task: str, settings: dict[str, Any], truncate: bool) -> int:
    """At a terminal each line is answered as it is typed, as fairseq-interactive does: reading all
    of stdin first left someone who typed a sentence and pressed Enter waiting, without a word,
    for a Ctrl-D they were never told of."""
    what = "a parse" if task == "parse" else "a translation"
    print(f"attnlab {task}: type a sentence and press Enter for {what}; Ctrl-D ends", file=sys.stderr)
    failed = 0
    for number, line in enumerate(iter(sys.stdin.buffer.readline, b""), 1):
        failed += _answer(model, task, decode_lines(line, "stdin", keep_invalid=True), settings, truncate, number)[1]
    return 1 if failed else 0


def cli_translate(argv: list[str]) -> int:
    return _decode_cli(argv, "translate")


def cli_parse(argv: list[str]) -> int:
    return _decode_cli(argv, "parse")


def cli_record(argv: list[str]) -> int:
    """`attnlab record --checkpoint DIR "sentence" ... | --input FILE --out DIR`."""
    parser = ArgumentParser(
        allow_abbrev=False, prog="attnlab record", description="Decode sentences and save their attention traces."
    )
    add_checkpoint_argument(parser)
    parser.add_argument("sentences", nargs="*", help="sentences to record (or --input FILE)")
    parser.add_argument("--input", "-i", help="file with one sentence per line")
    parser.add_argument("--reference", help="file of target lines: record teacher-forced on them instead of decoding")
    parser.add_argument("--out", default="traces", help="directory for the .trace files (default: traces)")
    parser.add_argument("--force", action="store_true", help="replace the traces an earlier run left in --out")
    parser.add_argument("--beam", type=int, help="beam size (default: the model's task's; 1: greedy)")
    args = parser.parse_args(argv)
    one_stdin({"--input": args.input, "--reference": args.reference})
    if (model_dir := model_directory(Path(args.out))) is not None:  # `--out CK` wrote traces among the weights
        where = "the" if model_dir == Path(args.out).absolute() else "inside the"
        raise AttnlabError(f"--out {args.out} is {where} model directory {model_dir}; name a directory elsewhere")
    sentences = list(args.sentences) + (read_input(args.input) if args.input else [])
    if not sentences:  # (of an empty --input it said "give ... --input FILE")
        raise AttnlabError(
            f"{args.input}: no lines to record" if args.input else "give sentences as arguments or --input FILE"
        )
    names = [f"sentence {n}" for n in range(1, len(args.sentences) + 1)]
    names += [f"{args.input}:{n}" for n in range(1, len(sentences) - len(args.sentences) + 1)]
    if args.reference and args.beam is not None:  # teacher-forced: nothing is decoded, and it was ignored
        raise AttnlabError("--beam is a decoding option, and --reference records teacher-forced: nothing is decoded")
    references = read_input(args.reference) if args.reference else None
    if references is not None and len(references) != len(sentences):
        raise AttnlabError(f"{len(sentences)} sentences but {len(references)} reference lines")
    for i, sentence in enumerate(sentences):  # before any trace is written: a run stopped halfway misleads
        if is_blank(sentence):
            raise AttnlabError(f"{names[i]}: the sentence is empty")
        if references is not None and is_blank(references[i]):
            raise AttnlabError(f"{args.reference}:{i + 1}: the reference is empty")
    model = load(args.checkpoint)
    # before an earlier run's traces go: --beam 0 deleted them, then failed
    check_settings(**search_settings(model.task, args.beam), n_best=None, vocab=model.config.target_vocab)
    for i, sentence in enumerate(sentences):  # too long for the model: said before the first trace too
        try:
            model.encode_source(sentence)
        except ModelInputError as error:
            raise ModelInputError(f"{names[i]}: {error}") from None
        try:
            if references is not None:  # (a parser's: also a tree that does not parse)
                model.encode_target(references[i])
        except AttnlabError as error:
            raise ModelInputError(f"{args.reference}:{i + 1}: {error}") from None
    out = _trace_directory(Path(args.out), args.force)  # an earlier run's traces go only when this one can run
    for i, sentence in enumerate(sentences):
        try:
            if references is not None:
                result = model.score(sentence, references[i], record=True)
            else:
                result = model.translate(sentence, beam=args.beam, record=True)
        except ModelInputError as error:
            raise ModelInputError(f"{names[i]}: {error}") from None
        path = result.trace.save(out / f"{i:05d}.trace")
        write_stdout(f"{path}\t{result.text}\n")
    return 0


def _trace_directory(out: Path, force: bool) -> Path:
    """`record --out`, without the traces of an earlier run: left beside the new ones, an old
    `00007.trace` read as this run's (the explorer lists the directory). They are replaced
    only with --force; other files are left alone."""
    if out.exists() and not out.is_dir():
        raise AttnlabError(f"--out {out} is a file; name a directory for the traces")
    earlier = sorted(path for path in out.glob("*.trace") if _RECORDED.fullmatch(path.name))
    if earlier and not force:
        raise AttnlabError(
            f"--out {out} already holds {len(earlier)} traces of an earlier run; pass --force to replace them"
        )
    for path in earlier:
        path.unlink()
    return out
