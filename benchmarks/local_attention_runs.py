"""Table 1's restricted self-attention, trained: r = 1, 3, 5 and global side by side.

The four runs come from the recipes `multi30k-en-de-r1`, `-r3`, `-r5` and `-global` (same data,
schedule, seed and number of updates; only `attn_window` differs). For each run this script
takes its newest checkpoint (or the average of the last `--last`) and measures, in one process
so that the figures are comparable:

- test2016 / test2017 sacreBLEU and chrF (beam 4, α 0.6, fp32);
- training tokens/s: attnlab's training step (the trainer's optimizer, kernels and loss) on
  the median batch of the training data, each model in turn, repeated alternately;
- decoding tokens/s: target tokens of test2016 produced per second (beam 4, fp32);
- head statistics per layer: mean attended distance and entropy (averaged over heads and
  query rows) of the teacher-forced references of the first `--stats-pairs` test2016 pairs.

The global run is the peer: speed columns print run / global.

    .venv/bin/python benchmarks/local_attention_runs.py --runs runs/local          # markdown
    .venv/bin/python benchmarks/local_attention_runs.py --runs runs/local --json   # one row per run
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from common import add_clock_argument, clock, machine, median
from train_throughput import make_step, median_batch, seconds_per_step

from attnlab.data.corpora import find_data_dir
from attnlab.decode.evaluate import bleu_chrf
from attnlab.decode.loading import load
from attnlab.model.checkpoint import step_dirs
from attnlab.record.stats import head_stats
from attnlab.train.average import average_run

RUNS = ("r1", "r3", "r5", "global")
KINDS = ("encoder", "decoder", "cross")


def averaged(run: Path, last: int) -> Path:
    """RUN-avg: the last `last` checkpoints averaged (remade when the run has a newer one)."""
    out = run.parent / f"{run.name}-avg"
    newest = step_dirs(run)[-1][1]
    stamp = out / "averaged-from"
    if not stamp.exists() or stamp.read_text() != newest.name:
        average_run(run, last, out, snapshots=4)
        stamp.write_text(newest.name)
    return out


def quality(model, data: Path, stats_pairs: int, limit: int | None, now) -> dict[str, object]:
    """BLEU/chrF on test2016 and test2017, decoding tokens/s on test2016, head statistics."""
    row: dict[str, object] = {}
    for split in ("test2016", "test2017"):
        sources = (data / "multi30k" / f"{split}.en").read_text().splitlines()[:limit]
        references = (data / "multi30k" / f"{split}.de").read_text().splitlines()[:limit]
        start = now()
        results = model.translate(sources)
        seconds = now() - start
        scores = bleu_chrf([r.text for r in results], references)
        row[f"{split}_bleu"], row[f"{split}_chrf"] = round(scores["bleu"], 2), round(scores["chrf"], 2)
        row["bleu_signature"] = scores["bleu_signature"]
        if split == "test2016":
            row["decode_tok_s"] = sum(len(r.tokens) for r in results) / seconds
            traces = [model.score(s, t).trace for s, t in zip(sources[:stats_pairs], references, strict=False)]
    per_layer: dict[str, list[dict[str, float]]] = {}
    table = head_stats(traces)
    for kind in KINDS:
        for layer in sorted({r["layer"] for r in table if r["kind"] == kind}):
            heads = [r for r in table if r["kind"] == kind and r["layer"] == layer]
            per_layer.setdefault(kind, []).append(
                {name: sum(h[name] for h in heads) / len(heads) for name in ("distance", "entropy")}
            )
    row["heads"] = per_layer
    return row


def training_speed(checkpoints: dict[str, Path], data: Path, args: argparse.Namespace, now) -> dict[str, float]:
    """Target tokens/s of one training step per model, timed alternately `--repeats` times."""
    batch = median_batch(data, args.max_tokens)
    steps = {}
    for name, path in checkpoints.items():
        model = load(path).model
        steps[name] = make_step(model, batch, bf16=True, device=torch.device("cpu"), ours=True)
        steps[name]()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            times[name].append(seconds_per_step(step, torch.device("cpu"), now, args.min_seconds, 1))
    return {name: batch.n_tgt_tokens / median(t) for name, t in times.items()}


def markdown(rows: list[dict[str, object]]) -> str:
    peer = next((r for r in rows if r["run"] == "global"), rows[-1])
    lines = [
        "| run | updates | test2016 BLEU | test2017 BLEU | chrF (2016) | train tok/s | / global | decode tok/s | / global |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['updates']:,} | {r['test2016_bleu']:.2f} | {r['test2017_bleu']:.2f} | "
            f"{r['test2016_chrf']:.2f} | {r['train_tok_s']:,.0f} | {r['train_tok_s'] / peer['train_tok_s']:.2f} | "
            f"{r['decode_tok_s']:,.0f} | {r['decode_tok_s'] / peer['decode_tok_s']:.2f} |"
        )
    layers = len(peer["heads"]["encoder"])
    lines += ["", "| run | " + " | ".join(f"{k} L{i + 1} dist / H" for k in KINDS for i in range(layers)) + " |"]
    lines.append("|---|" + "---:|" * (layers * len(KINDS)))
    for r in rows:
        cells = [f"{s['distance']:.2f} / {s['entropy']:.2f}" for k in KINDS for s in r["heads"].get(k, [])]
        lines.append(f"| {r['run']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="runs/local", help="the directory holding r1/ r3/ r5/ global/")
    parser.add_argument("--data-dir", help="the shared corpora (default: $ATTNLAB_DATA or ../shared/data)")
    parser.add_argument("--prepared", default="prepared/multi30k-en-de", help="prepared data for the training step")
    parser.add_argument(
        "--last",
        type=int,
        default=1,
        help="checkpoints averaged per run (1: the newest alone; averaging pays near convergence, not after 600 updates)",
    )
    parser.add_argument("--stats-pairs", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=6000, help="the recipes' token budget per batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=3.0)
    parser.add_argument("--limit", type=int, help="only the first N sentences of each test set")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="8 sentences, 1 checkpoint, short timings")
    add_clock_argument(parser)
    args = parser.parse_args(argv)
    if args.stats_pairs < 1:  # the table compares the runs' heads: it needs one pair at least
        parser.error(f"--stats-pairs must be at least 1, got {args.stats_pairs}")
    if args.smoke:
        args.limit, args.last, args.stats_pairs, args.repeats, args.min_seconds = 8, 1, 2, 1, 0.1
    now = clock(args.clock)
    data = find_data_dir(args.data_dir)
    runs = {name: Path(args.runs) / name for name in RUNS if step_dirs(Path(args.runs) / name)}
    if not runs:
        print(f"no runs under {args.runs} (train them: attnlab train --recipe multi30k-en-de-r1 ...)", file=sys.stderr)
        return 1
    print(f"# {machine(torch.device('cpu'), args.clock)}", file=sys.stderr)
    checkpoints = {name: averaged(run, args.last) for name, run in runs.items()}
    speed = training_speed(checkpoints, Path(args.prepared), args, now)
    rows = []
    for name, path in checkpoints.items():
        started = time.perf_counter()
        model = load(path)
        row = {"run": name, "updates": step_dirs(runs[name])[-1][0], "train_tok_s": speed[name]}
        row |= quality(model, data, args.stats_pairs, args.limit, now)
        rows.append(row)
        print(f"# {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
