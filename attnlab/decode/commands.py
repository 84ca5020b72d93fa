"""`attnlab translate`, `attnlab parse` and `attnlab record`: one output line per input line; a
line the model cannot take is reported on stderr and left empty, the rest are decoded.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from attnlab.decode.api import DEFAULTS, DTYPES, load
from attnlab.errors import AttnlabError, ModelInputError


def _lines(source: str | None) -> list[str]:
    if source in (None, "-"):
        return sys.stdin.read().splitlines()
    try:
        return Path(source).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise AttnlabError(f"cannot read {source}: {error}") from None


def add_dtype_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="fp32",
        help="bf16: about 2x faster decoding on CPUs with bf16 instructions (docs/BENCHMARKS.md)",
    )


def _decode_cli(argv: list[str], task: str) -> int:
    defaults = DEFAULTS[task]
    parser = argparse.ArgumentParser(
        prog=f"attnlab {task}", description=f"{task.capitalize()} lines (one output line per input line)."
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", "-i", default="-", help="file with one sentence per line (default: stdin)")
    parser.add_argument("--beam", type=int, default=defaults["beam"])
    parser.add_argument("--alpha", type=float, default=defaults["alpha"])
    parser.add_argument("--max-len-a", type=float, default=1.0)
    parser.add_argument("--max-len-b", type=int, default=defaults["max_len_b"])
    parser.add_argument("--truncate", action="store_true", help="cut over-long inputs instead of failing them")
    add_dtype_argument(parser)
    args = parser.parse_args(argv)
    model = load(args.checkpoint, dtype=args.dtype)
    if task == "parse" and model.task != "parse":
        raise AttnlabError(f"{args.checkpoint} is a {model.task} model, not a parser")
    lines = _lines(args.input)
    start = time.time()
    good = [i for i, line in enumerate(lines) if line.strip()]
    outputs = [""] * len(lines)
    failed = 0
    if good:
        try:
            results = model.translate(
                [lines[i] for i in good], args.beam, args.alpha, args.max_len_a, args.max_len_b, truncate=args.truncate
            )
            for i, result in zip(good, results, strict=True):
                outputs[i] = result.text
        except ModelInputError:  # find the offending lines, decode the rest
            for i in good:
                try:
                    outputs[i] = model.translate(
                        lines[i], args.beam, args.alpha, args.max_len_a, args.max_len_b, truncate=args.truncate
                    ).text
                except ModelInputError as error:
                    failed += 1
                    print(f"attnlab {task}: line {i + 1}: {error}; writing an empty line", file=sys.stderr)
    for i, line in enumerate(lines):
        if not line.strip():
            print(f"attnlab {task}: line {i + 1} is empty; writing an empty line", file=sys.stderr)
    sys.stdout.write("".join(out + "\n" for out in outputs))
    print(f"attnlab {task}: {len(good) - failed} of {len(lines)} lines in {time.time() - start:.1f}s", file=sys.stderr)
    return 0


def cli_translate(argv: list[str]) -> int:
    return _decode_cli(argv, "translate")


def cli_parse(argv: list[str]) -> int:
    return _decode_cli(argv, "parse")


def cli_record(argv: list[str]) -> int:
    """`attnlab record --checkpoint DIR "sentence" ... | --input FILE --out DIR`."""
    parser = argparse.ArgumentParser(
        prog="attnlab record", description="Decode sentences and save their attention traces."
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("sentences", nargs="*")
    parser.add_argument("--input", "-i", help="file with one sentence per line")
    parser.add_argument("--reference", help="file of target lines: record teacher-forced on them instead of decoding")
    parser.add_argument("--out", default="traces", help="directory for the .trace files")
    parser.add_argument("--beam", type=int)
    args = parser.parse_args(argv)
    sentences = list(args.sentences) + (_lines(args.input) if args.input else [])
    if not sentences:
        raise AttnlabError("give sentences as arguments or --input FILE")
    model = load(args.checkpoint)
    references = _lines(args.reference) if args.reference else None
    if references is not None and len(references) != len(sentences):
        raise AttnlabError(f"{len(sentences)} sentences but {len(references)} reference lines")
    out = Path(args.out)
    for i, sentence in enumerate(sentences):
        if references is not None:
            result = model.score(sentence, references[i], record=True)
        else:
            result = model.translate(sentence, beam=args.beam, record=True)
        path = result.trace.save(out / f"{i:05d}.trace")
        print(f"{path}\t{result.text}")
    return 0
