"""How long the host takes to turn a token-budget batch into padded tensors (`collate`).

On a GPU the trainer collates the next update's batch while the device runs this one
(`attnlab.train.update`), so collating must take less than a step: base's step on an H200 is
45 ms (docs/BENCHMARKS.md, GPU round three) for the paper's 25k-token batch. The peer is the
collate most PyTorch training code writes (fairseq's `collate_tokens`, torchtext's recipes): one
tensor per sentence, framed with BOS/EOS, then `torch.nn.utils.rnn.pad_sequence`. Both build the
same three tensors from the same memory-mapped Multi30k split (checked), on one thread.

    .venv/bin/python benchmarks/collate.py --json            # 25,000 and 6,000 tokens a batch
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch
from common import machine, median, prepared_multi30k
from torch.nn.utils.rnn import pad_sequence

from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


def peer_collate(data: ParallelData, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src + EOS, BOS + tgt, tgt + EOS), each padded by `pad_sequence`, a sentence at a time."""
    bos, eos = torch.tensor([BOS_ID]), torch.tensor([EOS_ID])
    src = [torch.cat([torch.from_numpy(data.src(i).astype(np.int64)), eos]) for i in indices]
    tgt = [torch.from_numpy(data.tgt(i).astype(np.int64)) for i in indices]
    return tuple(
        pad_sequence(rows, batch_first=True, padding_value=PAD_ID)
        for rows in (src, [torch.cat([bos, t]) for t in tgt], [torch.cat([t, eos]) for t in tgt])
    )


def measure(data: ParallelData, max_tokens: int, batches: int, repeats: int) -> dict:
    """Median milliseconds a batch for both systems over `batches` batches of the first epoch."""
    sampler = TokenBatchSampler(data.src_lens, data.tgt_lens, max_tokens, seed=0)
    chosen = [indices for _, indices in zip(range(batches), sampler, strict=False)]
    ours, theirs = [], []
    for _ in range(repeats):
        for indices in chosen:
            started = time.perf_counter()
            batch = collate(data, indices)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            peer = peer_collate(data, indices)
            theirs.append(time.perf_counter() - started)
            if not all(torch.equal(a, b) for a, b in zip((batch.src, batch.tgt_in, batch.tgt_out), peer, strict=True)):
                raise SystemExit(f"collate and the peer disagree on a batch of {max_tokens} tokens")
    return {
        "max_tokens": max_tokens,
        "pairs_per_batch": round(float(np.mean([len(i) for i in chosen]))),
        "batches": len(chosen) * repeats,
        "attnlab_ms": round(median(ours) * 1e3, 3),
        "peer_ms": round(median(theirs) * 1e3, 3),
        "ratio": round(median(theirs) / median(ours), 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a prepared Multi30k directory (default: prepared now, ~2 s)")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[25_000, 6_000], help="token budgets")
    parser.add_argument("--batches", type=int, default=20, help="batches per budget")
    parser.add_argument("--repeats", type=int, default=3, help="passes over them")
    parser.add_argument("--json", action="store_true", help="one JSON object per budget on stdout")
    parser.add_argument("--smoke", action="store_true", help="2 batches, 1 pass: checks the script")
    args = parser.parse_args(argv)
    if args.smoke:
        args.batches, args.repeats = 2, 1
    torch.set_num_threads(1)
    print(f"# {machine(torch.device('cpu'))}", file=sys.stderr)
    data = ParallelData(prepared_multi30k(args.data, vocab_size=8000), "train")
    for max_tokens in args.max_tokens:
        row = measure(data, max_tokens, args.batches, args.repeats)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(
                f"{max_tokens:,} tokens ({row['pairs_per_batch']:,} pairs): attnlab {row['attnlab_ms']} ms, "
                f"pad_sequence {row['peer_ms']} ms a batch: attnlab {row['ratio']}x",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
