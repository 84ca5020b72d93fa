"""The paper's base and big runs on one GPU: step time, tokens/s, memory, MFU, projected wall time.

§5.1-5.2: batches of about 25,000 source + 25,000 target tokens; base trained 100k steps in
12 hours, big 300k steps in 3.5 days, both on 8 P100 GPUs. This script takes attnlab's training
step as `attnlab train --compile --dtype bf16` takes it (bf16 autocast, `torch.compile` of the
model, label-smoothed loss, Adam) at that batch size on one GPU, and projects how long the
paper's runs would take there. It is meant for a short GPU rental: both presets, compilation
included, finish in well under 8 minutes on a current GPU.

The batch is synthetic — `--tokens // --seq-len` sentence pairs of `--seq-len` random ids on
each side, without padding — because a step's cost depends on the shapes, not on the ids, and a
GPU rental need not hold WMT14. `--update-freq N` splits the batch into N micro-batches with
gradient accumulation (`attnlab train --update-freq`), for GPUs that cannot hold 25k tokens of
32k-way logits at once. MFU is measured against the bf16 matrix-multiply peak measured in the
same run.

    python benchmarks/gpu_paper_runs.py                  # on the GPU machine
    python benchmarks/gpu_paper_runs.py --smoke          # on the CPU: tiny model, checks the script
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable

import torch
from common import clock, machine, matmul_peak, synchronize
from torch import Tensor, nn

from attnlab.model.config import ModelConfig, preset
from attnlab.model.flops import PAPER_RUNS, train_flops_per_target_token
from attnlab.model.transformer import Transformer, count_parameters
from attnlab.train.regime import label_smoothed_loss

PAPER_STEPS = {"base": 100_000, "big": 300_000}  # §5.2


def synthetic_batch(
    config: ModelConfig, pairs: int, length: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """(src, tgt_in, tgt_out), each (pairs, length): random ids, </s> last, <s> first on tgt_in."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.vocab_size, (pairs, length), generator=generator)
    tgt = torch.randint(4, config.vocab_size, (pairs, length), generator=generator)
    src[:, -1] = config.eos_id
    tgt_in = torch.cat([torch.full((pairs, 1), config.bos_id), tgt[:, :-1]], dim=1)
    tgt_out = tgt.clone()
    tgt_out[:, -1] = config.eos_id
    return src.to(device), tgt_in.to(device), tgt_out.to(device)


def make_step(
    model: Transformer, net: nn.Module, batches: list[tuple[Tensor, Tensor, Tensor]], device: torch.device
) -> Callable[[], float]:
    """One update over the micro-batches as `Trainer.train_step` takes it (`net` is `model` or its
    compiled wrapper); returns the loss per target token."""
    config = model.config
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    total = sum(int(tgt_out.ne(config.pad_id).sum()) for _, _, tgt_out in batches)

    def step() -> float:
        net.train()
        optimizer.zero_grad(set_to_none=True)
        summed = 0.0
        for src, tgt_in, tgt_out in batches:
            with torch.autocast(device.type, torch.bfloat16):
                loss, _ = label_smoothed_loss(net(src, tgt_in), tgt_out, config.eps_ls, config.pad_id)
                (loss / total).backward()
            summed += loss.item()
        optimizer.step()
        return summed / total

    return step


def run_case(name: str, config: ModelConfig, device: torch.device, args: argparse.Namespace, peak: float) -> dict:
    """Compile, warm up, time `--steps` updates; project the paper's step count."""
    torch.manual_seed(0)
    model = Transformer(config).to(device)
    net: nn.Module = torch.compile(model, backend=args.compile_backend) if args.compile_backend != "none" else model
    pairs = args.tokens // args.seq_len
    micro = -(-pairs // args.update_freq)  # ceil: the last micro-batch may be smaller
    full = synthetic_batch(config, pairs, args.seq_len, device)
    batches = [tuple(t[i : i + micro] for t in full) for i in range(0, pairs, micro)]
    step = make_step(model, net, batches, device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    for _ in range(args.warmup):  # the first call compiles
        loss = step()
    synchronize(device)
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    synchronize(device)
    step_s = (time.perf_counter() - started) / args.steps
    tokens_per_side = pairs * args.seq_len
    tokens_per_s = tokens_per_side / step_s
    flops = train_flops_per_target_token(config, args.seq_len, args.seq_len)
    paper_s, paper_gpus, _, _ = PAPER_RUNS[name]
    projected_s = PAPER_STEPS[name] * step_s
    if device.type == "cuda":
        peak_memory = torch.cuda.max_memory_allocated(device) / 2**30
    else:  # the process's peak resident memory (KiB on Linux), everything included
        peak_memory = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return {
        "preset": name,
        "params_millions": round(count_parameters(model) / 1e6, 1),
        "src_tokens_per_step": tokens_per_side,
        "tgt_tokens_per_step": tokens_per_side,
        "update_freq": args.update_freq,
        "warmup_and_compile_s": round(warmup_s, 1),
        "step_s": round(step_s, 4),
        "tgt_tokens_per_s": round(tokens_per_s),
        "peak_memory_gib": round(peak_memory, 2),
        "mfu": round(tokens_per_s * flops / peak, 3),
        "matmul_peak_tflops": round(peak / 1e12, 1),
        "last_loss": round(loss, 3),
        "paper_steps": PAPER_STEPS[name],
        "projected_hours": round(projected_s / 3600, 2),
        "paper_hours": round(paper_s / 3600, 1),
        "paper_gpus": paper_gpus,
        "speedup_vs_paper_wall": round(paper_s / projected_s, 2),
        "speedup_vs_paper_per_gpu": round(paper_s * paper_gpus / projected_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["base", "big"], choices=list(PAPER_STEPS))
    parser.add_argument("--tokens", type=int, default=25_000, help="target (and source) tokens per step (§5.1)")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per sentence, each side")
    parser.add_argument("--update-freq", type=int, default=1, help="micro-batches per step (gradient accumulation)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per preset")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend, or 'none'")
    parser.add_argument("--json", action="store_true", help="one JSON object per preset on stdout")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CPU, tiny model, 2 steps, compile with the eager backend: checks the script",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        device = torch.device("cpu")
        args.tokens, args.seq_len, args.steps, args.warmup, args.compile_backend = 256, 16, 2, 1, "eager"
    elif not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this script measures a GPU (use --smoke to check it on the CPU)")
    else:
        device = torch.device("cuda")
    print(f"# {machine(device)}", file=sys.stderr)
    peak = matmul_peak(torch.bfloat16, device, clock("wall"), size=256 if args.smoke else 8192)
    print(f"# measured bf16 matmul peak: {peak / 1e9:,.0f} GFLOP/s", file=sys.stderr)
    for name in args.presets:
        config = preset("tiny") if args.smoke else preset(name)
        try:
            result = run_case(name, config, device, args, peak)
        except torch.cuda.OutOfMemoryError:
            print(f"{name}: out of GPU memory at {args.tokens} tokens; rerun with --update-freq 2", file=sys.stderr)
            torch.cuda.empty_cache()
            continue
        if args.smoke:
            result["preset"] = f"{name} (smoke: tiny model)"
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        print(
            f"{result['preset']}: {result['params_millions']}M params, {result['tgt_tokens_per_step']:,}+"
            f"{result['tgt_tokens_per_step']:,} tokens/step, step {result['step_s'] * 1e3:,.0f} ms, "
            f"{result['tgt_tokens_per_s']:,} target tokens/s, MFU {result['mfu']:.0%}, "
            f"peak memory {result['peak_memory_gib']:.1f} GiB, compile + warm-up {result['warmup_and_compile_s']} s\n"
            f"  {result['paper_steps']:,} steps here: {result['projected_hours']:,.1f} h on this device vs the paper's "
            f"{result['paper_hours']:g} h on {result['paper_gpus']} P100 ({result['speedup_vs_paper_wall']}x the "
            f"wall-clock speed, {result['speedup_vs_paper_per_gpu']}x per GPU)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
