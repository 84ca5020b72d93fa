"""`attnlab data prepare CORPUS --out DIR ...` and `attnlab data download CORPUS ...`."""

from __future__ import annotations

import os
import sys

from attnlab.data import download
from attnlab.data.corpora import CORPORA, DEFAULT_PAIR, DEFAULT_VOCAB, DOWNLOADED, PTB_LEAVES, TEXT_SPLITS
from attnlab.data.prepared import prepare
from attnlab.errors import ArgumentParser

SUBCOMMANDS = ("prepare", "download")  # `attnlab data X`, as the CLI's lines name them


def cli(argv: list[str]) -> int:
    parser = ArgumentParser(allow_abbrev=False, prog="attnlab data", description="prepare or download corpora")
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser(
        "prepare",
        allow_abbrev=False,
        help="corpus -> shared BPE vocabulary + memory-mapped token ids",
        description="Read a corpus's splits, learn one shared BPE vocabulary on its training split, and write "
        "every split as memory-mapped token ids for `attnlab train` (docs/BENCHMARKS.md, Data).",
    )
    prep.add_argument("corpus", choices=CORPORA, help="which corpus (its files under --data-dir)")
    prep.add_argument("--out", required=True, help="directory to write the prepared data into")
    prep.add_argument(
        "--data-dir",
        help=f"corpus directory (default: $ATTNLAB_DATA, else ./{DOWNLOADED} where `data download` saves, "
        "else ../shared/data)",
    )
    prep.add_argument("--vocab-size", type=int, help=f"BPE vocabulary size (default per corpus: {DEFAULT_VOCAB})")
    prep.add_argument(
        "--pair", help=f"SRC-TGT languages (default per corpus: {DEFAULT_PAIR}; tatoeba: en with de, es or zh)"
    )
    prep.add_argument(
        "--max-len", type=int, default=250, help="drop training pairs with a longer side (tokens; default 250)"
    )
    prep.add_argument(
        "--seed", type=int, default=0, help="seeds the tokenizer sample and the Tatoeba split (default 0)"
    )
    prep.add_argument("--limit", type=int, help="keep only the first N pairs of each split (a quick look)")
    prep.add_argument("--train-dir", help="wmt14: directory of STEM.en/STEM.de training files")
    prep.add_argument(
        "--leaves",
        choices=PTB_LEAVES,
        default="words",
        help="ptb: write the words in the target trees, or XX (default: words)",
    )
    for name in TEXT_SPLITS:
        prep.add_argument(f"--{name}", nargs=2, metavar=("SRC", "TGT"), help=f"text: the {name} split's parallel files")
    down = commands.add_parser(
        "download",
        allow_abbrev=False,
        help="fetch the public originals and verify their checksums",
        description=f"Fetch a corpus's public originals and verify their checksums, into --out (default: "
        f"$ATTNLAB_DATA, else ./{DOWNLOADED}, where `data prepare` looks by itself).",
    )
    down.add_argument("corpus", choices=tuple(download.CORPORA), help="which corpus to fetch")
    down.add_argument(
        "--out",
        default=os.environ.get("ATTNLAB_DATA", DOWNLOADED),
        help=f"data directory to fill (default: $ATTNLAB_DATA, else ./{DOWNLOADED}, where `prepare` looks by itself; "
        "another directory: give `prepare` --data-dir DIR or set ATTNLAB_DATA)",
    )
    down.add_argument("--url-base", help="fetch from this mirror instead (same paths; http(s):// or file://)")
    args = parser.parse_args(argv)
    if args.command == "download":
        download.download(args.corpus, args.out, url_base=args.url_base)
        return 0
    prepare(
        args.corpus,
        args.out,
        data_dir=args.data_dir,
        vocab_size=args.vocab_size,
        pair=args.pair,
        max_len=args.max_len,
        seed=args.seed,
        train_dir=args.train_dir,
        leaves=args.leaves,
        text_files={name: getattr(args, name) for name in TEXT_SPLITS if getattr(args, name)},
        limit=args.limit,
    )
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
