"""How `attnlab data prepare` scales: wall time and peak memory against corpus size.

Builds synthetic WMT-like training sets of N pairs from the Tatoeba EN-DE pairs in the data
directory (the original pairs, then pairs of two random Tatoeba pairs joined into one longer
sentence, so lengths look more like news text and lines rarely repeat), writes them under
--workdir (never into the repository), and runs `attnlab data prepare wmt14 --train-dir` on each
in a fresh process, reading that process's peak RSS from the kernel (wait4). Multi30k is prepared
too, as the reference the issue asks for.

    .venv/bin/python benchmarks/prepare_scale.py --sizes 250000 500000 1000000
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from attnlab.data.corpora import find_data_dir, read_pairs


def make_corpus(data_dir: Path, out: Path, n_pairs: int, seed: int = 0) -> int:
    """Write `n_pairs` EN-DE training pairs to out/train.{en,de}; return the bytes of text written."""
    en_path, de_path = (next((data_dir / "tatoeba_deu_eng").glob(f"train.{lang}*")) for lang in ("en", "de"))
    pairs = list(read_pairs(en_path, de_path))  # plain or .gz, as the data directory has them
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.en", "w", encoding="utf-8") as en, open(out / "train.de", "w", encoding="utf-8") as de:
        for i in range(n_pairs):
            if i < len(pairs):
                english, german = pairs[i]
            else:
                (e1, g1), (e2, g2) = rng.choice(pairs), rng.choice(pairs)
                english, german = f"{e1} {e2}", f"{g1} {g2}"
            en.write(english + "\n")
            de.write(german + "\n")
    return (out / "train.en").stat().st_size + (out / "train.de").stat().st_size


def run_prepare(args: list[str]) -> tuple[float, float]:
    """Run `attnlab data prepare ARGS` in a child process: (seconds, peak RSS in MiB)."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "attnlab", "data", "prepare", *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    if status:
        raise SystemExit(f"prepare {' '.join(args)} failed with status {status}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 500_000, 1_000_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/attnlab-prepare-scale"))
    parser.add_argument("--vocab-size", type=int, default=37000, help="the paper's WMT EN-DE size (§5.1)")
    parser.add_argument("--data-dir", help="corpus directory (default: as attnlab finds it)")
    args = parser.parse_args()
    data_dir = find_data_dir(args.data_dir)
    print(f"# {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    seconds, rss = run_prepare(["--help"])
    print(f"baseline (imports only, `prepare --help`): peak RSS {rss:.0f} MiB")
    seconds, rss = run_prepare(["multi30k", "--out", str(args.workdir / "multi30k"), "--data-dir", str(data_dir)])
    print(f"multi30k (29k pairs, vocab 8000): {seconds:.1f} s, peak RSS {rss:.0f} MiB")
    print("| pairs | text MB | seconds | peak RSS MiB | RSS / text |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in args.sizes:
        corpus = args.workdir / f"train{n}"
        text_bytes = make_corpus(data_dir, corpus, n)
        out = args.workdir / f"prepared{n}"
        seconds, rss = run_prepare(
            ["wmt14", "--train-dir", str(corpus), "--out", str(out), "--data-dir", str(data_dir)]
            + ["--vocab-size", str(args.vocab_size)]
        )
        mb = text_bytes / 2**20
        print(f"| {n:,} | {mb:.0f} | {seconds:.1f} | {rss:.0f} | {rss / mb:.1f} |", flush=True)
        shutil.rmtree(corpus)
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
