"""The paper's base and big runs on one GPU: step time, tokens/s, memory, MFU, projected wall time,
and the same batch through `torch.nn.Transformer` for a ratio measured in the same run.

§5.1-5.2: batches of about 25,000 source + 25,000 target tokens; base trained 100k steps in
12 hours, big 300k steps in 3.5 days, both on 8 P100 GPUs. This script takes attnlab's training
step as `attnlab train` takes it on a GPU (`attnlab.train.update.Update`, the trainer's own: the
model and the loss compiled as `--compile auto` compiles them there, bf16 autocast, logits for the
scored positions only, label-smoothed loss, the finiteness check on the GPU, fused Adam, one read
back per step; the next step's batch checked on the host, pinned and copied while the GPU works)
at that batch size on one GPU, and projects how long the
paper's runs would take there. The peer is the same model built from `torch.nn.Transformer`
(`train_throughput.TorchTransformerMT`), run as its users write it: eager, plain Adam, logits
for every position. It is meant for a short GPU rental: both presets, compilation included,
finish in a few minutes on a current GPU.

The batch is synthetic — `--tokens // --seq-len` sentence pairs of `--seq-len` random ids on
each side, without padding — because a step's cost depends on the shapes, not on the ids, and a
GPU rental need not hold WMT14. `--update-freq N` splits the batch into N micro-batches with
gradient accumulation (`attnlab train --update-freq`), for GPUs that cannot hold 25k tokens of
32k-way logits at once. MFU is measured against the bf16 matrix-multiply peak measured in the
same run. `--profile DIR` writes where a step's GPU time goes (torch.profiler, per kernel and
per kind of kernel) to DIR/profile_PRESET.txt.

    python benchmarks/gpu_paper_runs.py                  # on the GPU machine
    python benchmarks/gpu_paper_runs.py --smoke          # on the CPU: tiny model, checks the script
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import clock, kernel_sources, machine, matmul_peak, synchronize
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity
from torch.profiler import profile as profiler
from train_throughput import TorchTransformerMT

from attnlab.data.batching import Batch
from attnlab.model.config import ModelConfig, preset
from attnlab.model.flops import PAPER_RUNS, train_flops_per_target_token
from attnlab.model.transformer import Transformer, count_parameters
from attnlab.train.regime import COMPILE_SHAPES, compile_model, label_smoothed_loss, make_loss, make_optimizer
from attnlab.train.update import DeviceBatch, Update, stage

PAPER_STEPS = {"base": 100_000, "big": 300_000}  # §5.2


def synthetic_batch(config: ModelConfig, pairs: int, length: int) -> Batch:
    """`pairs` pairs of `length` random ids a side, </s> last, <s> first on tgt_in; no padding, so
    every target position is scored."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, config.vocab_size, (pairs, length), generator=generator)
    tgt = torch.randint(4, config.vocab_size, (pairs, length), generator=generator)
    src[:, -1] = config.eos_id
    tgt_in = torch.cat([torch.full((pairs, 1), config.bos_id), tgt[:, :-1]], dim=1)
    tgt_out = tgt.clone()
    tgt_out[:, -1] = config.eos_id
    return Batch(src, tgt_in, tgt_out, tgt_out.numel(), np.arange(pairs), torch.arange(tgt_out.numel()))


def split(batch: Batch, parts: int) -> list[Batch]:
    """`batch` as `parts` micro-batches of whole pairs (the last may be smaller)."""
    rows = -(-len(batch.indices) // parts)
    out = []
    for i in range(0, len(batch.indices), rows):
        src, tgt_in, tgt_out = (t[i : i + rows] for t in (batch.src, batch.tgt_in, batch.tgt_out))
        out.append(
            Batch(src, tgt_in, tgt_out, tgt_out.numel(), batch.indices[i : i + rows], torch.arange(tgt_out.numel()))
        )
    return out


def attnlab_step(
    model: Transformer, batches: list[Batch], device: torch.device, compiled: bool, shapes: str = "dynamic"
) -> Callable[[], float]:
    """One update as `Trainer.train_step` takes it (`attnlab.train.update.Update`); returns the
    loss per target token. Each step stages the next update's batches (ids checked, pinned,
    copied) while the device works, as the trainer does; `compiled` (`--compile on`): the model
    and the loss compiled as `attnlab train` compiles them on a GPU, or as `shapes` says
    (`regime.COMPILE_SHAPES`: the `--variants` measured against the trainer's "dynamic")."""
    optimizer = make_optimizer(model)
    for group in optimizer.param_groups:
        group["lr"] = 1e-4
    net = compile_model(model, shapes) if compiled else model
    update = Update(net, model, optimizer, make_loss(compiled, shapes), autocast=True)
    total = sum(b.n_tgt_tokens for b in batches)
    seeds = list(range(len(batches)))

    def staged() -> list[DeviceBatch]:
        return [stage(b, model, device, check_ids=compiled) for b in batches]

    upcoming = staged()

    def step() -> float:
        nonlocal upcoming
        out = update(upcoming, total, seeds, staged)
        upcoming = out.then
        return out.loss / total

    return step


def peer_step(model: nn.Module, batches: list[Batch], device: torch.device) -> Callable[[], float]:
    """The same update for `nn.Transformer` as its users write it: eager, plain Adam, logits for
    every position, the batch on the GPU once."""
    config = model.config
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    on_device = [(b.src.to(device), b.tgt_in.to(device), b.tgt_out.to(device)) for b in batches]
    total = sum(b.n_tgt_tokens for b in batches)

    def step() -> float:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        summed = 0.0
        for src, tgt_in, tgt_out in on_device:
            with torch.autocast(device.type, torch.bfloat16):
                loss, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, config.eps_ls, config.pad_id)
                (loss / total).backward()
            summed += loss.item()
        optimizer.step()
        return summed / total

    return step


def timed(
    step: Callable[[], float], device: torch.device, warmup: int, steps: int
) -> tuple[float, float, float, float]:
    """(warm-up seconds, seconds per timed step, last loss, peak memory GiB) of `steps` updates
    after `warmup` untimed ones (the first compiles)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    for _ in range(warmup):
        loss = step()
    synchronize(device)
    warmup_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        loss = step()
    synchronize(device)
    step_s = (time.perf_counter() - started) / steps
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return warmup_s, step_s, loss, memory


def host_waits(step: Callable[[], float], device: torch.device, steps: int = 3) -> tuple[float | None, dict[str, int]]:
    """Operations per step that made the host wait for the GPU (`torch.cuda.set_sync_debug_mode`
    warns at each: `.item()`, `.tolist()`, a copy to pageable memory, `nonzero`...), and the
    Python lines they came from ("file.py:line": count over `steps`): 1 a step is the step's one
    read-back (`attnlab.train.update`). (None, {}) off a GPU, where nothing waits."""
    if device.type != "cuda":
        return None, {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sites = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))
    return sum(sites.values()) / steps, dict(sites)


# How a kernel's name says what it does (first match wins); self time summed per kind.
KERNEL_KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient_attention")),
    ("matmul", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "aten::mm", "aten::addmm", "aten::bmm", "_tem_fused")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("triton", ("triton",)),
    ("copy", ("memcpy", "memset", "copy_", "to_copy")),
    ("elementwise", ("elementwise", "vectorized", "reduce", "softmax", "layer_norm", "dropout")),
)


def profile(step: Callable[[], float], device: torch.device, path: Path, steps: int = 3) -> None:
    """Where `steps` updates spend their time, per operator and per GPU kernel, written to `path`,
    with the code of the slowest compiled kernels beside it (`kernel_sources`)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profiler(activities=activities) as prof:
        for _ in range(steps):
            step()
        synchronize(device)
    averages = prof.key_averages()
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    kinds: dict[str, float] = {}
    for event in averages:
        # the kernels themselves: the operators that launched them and user ranges repeat their time
        if device.type == "cuda" and (event.device_type != DeviceType.CUDA or event.is_user_annotation):
            continue
        spent = getattr(event, key, 0) or 0
        name = event.key.lower()
        kind = next(
            (label for label, words in KERNEL_KINDS if any(w in name for w in words)),
            "other",
        )
        kinds[kind] = kinds.get(kind, 0.0) + spent
    spent_total = sum(kinds.values()) or 1.0
    lines = [f"# {steps} updates; self {key.split('_')[1]} time by kind of kernel"]
    lines += [
        f"{kind:<12} {t / 1e3 / steps:9.2f} ms/step  {t / spent_total:6.1%}"
        for kind, t in sorted(kinds.items(), key=lambda kv: -kv[1])
    ]
    lines += ["", averages.table(sort_by=key, row_limit=40, max_name_column_width=90)]
    sources = path.parent / path.stem.replace("profile_", "kernels_")
    if copied := kernel_sources(averages, key, sources):  # the slowest compiled kernels' code, kept
        lines += ["", f"# the code of the {len(copied)} slowest compiled kernels: {sources.name}/", *copied]
    path.write_text("\n".join(lines))


def attnlab_case(
    name: str, variant: str, config: ModelConfig, batches: list[Batch], device: torch.device, args: argparse.Namespace
) -> dict:
    """attnlab's step compiled as `variant` says, on a fresh model: its timings and profile."""
    torch._dynamo.reset()  # each variant compiles afresh, not as a recompilation of the last
    torch.manual_seed(0)
    model = Transformer(config).to(device)
    step = attnlab_step(model, batches, device, compiled=args.compile == "on", shapes=variant)
    warmup_s, step_s, loss, memory = timed(step, device, args.warmup, args.steps)
    syncs, sync_sites = host_waits(step, device)
    if args.profile:
        suffix = "" if variant == "dynamic" else f"_{variant}"
        profile(step, device, Path(args.profile) / f"profile_{name}{suffix}.txt")
    params = count_parameters(model)
    del model, step
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "params": params,
        "warmup_s": warmup_s,
        "step_s": step_s,
        "loss": loss,
        "memory": memory,
        "syncs": syncs,
        "sync_sites": sync_sites,
    }


def run_case(name: str, config: ModelConfig, device: torch.device, args: argparse.Namespace, peak: float) -> list[dict]:
    """attnlab's step (once per `--variants`) and the peer's on the same batch; project the
    paper's step count. One row per variant."""
    pairs = args.tokens // args.seq_len
    batches = split(synthetic_batch(config, pairs, args.seq_len), args.update_freq)
    ours = {}
    for variant in args.variants:
        try:
            ours[variant] = attnlab_case(name, variant, config, batches, device, args)
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as error:  # a rental is short: one variant that fails must not cost the others
            print(f"{name} ({variant}): failed, {type(error).__name__}: {error}".splitlines()[0], file=sys.stderr)
    torch.manual_seed(0)
    peer = TorchTransformerMT(config).to(device)
    _, peer_s, _, peer_memory = timed(peer_step(peer, batches, device), device, args.warmup, args.steps)
    del peer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return [row(name, variant, config, pairs, args, peak, case, peer_s, peer_memory) for variant, case in ours.items()]


def row(
    name: str,
    variant: str,
    config: ModelConfig,
    pairs: int,
    args: argparse.Namespace,
    peak: float,
    case: dict,
    peer_s: float,
    peer_memory: float,
) -> dict:
    """One variant's figures, as ratios to the peer's and the paper's."""
    params, warmup_s, step_s, loss, memory, syncs = (
        case[k] for k in ("params", "warmup_s", "step_s", "loss", "memory", "syncs")
    )
    tokens_per_side = pairs * args.seq_len
    flops = train_flops_per_target_token(config, args.seq_len, args.seq_len)
    paper_s, paper_gpus, _, _ = PAPER_RUNS[name]
    projected_s = PAPER_STEPS[name] * step_s
    return {
        "preset": name,
        "variant": variant,
        "params_millions": round(params / 1e6, 1),
        "src_tokens_per_step": tokens_per_side,
        "tgt_tokens_per_step": tokens_per_side,
        "update_freq": args.update_freq,
        "compile": args.compile,
        "warmup_and_compile_s": round(warmup_s, 1),
        "host_waits_per_step": syncs,
        "host_wait_sites": case["sync_sites"],
        "step_s": round(step_s, 4),
        "tgt_tokens_per_s": round(tokens_per_side / step_s),
        "peak_memory_gib": round(memory, 2),
        "mfu": round(tokens_per_side / step_s * flops / peak, 3),
        "peer_step_s": round(peer_s, 4),
        "peer_tgt_tokens_per_s": round(tokens_per_side / peer_s),
        "peer_peak_memory_gib": round(peer_memory, 2),
        "peer_mfu": round(tokens_per_side / peer_s * flops / peak, 3),
        "ratio": round(peer_s / step_s, 3),
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
    parser.add_argument("--steps", type=int, default=20, help="timed steps per preset and system")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    parser.add_argument("--compile", default="on", choices=["on", "off"], help="attnlab's model and loss compiled")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["dynamic"],
        choices=list(COMPILE_SHAPES),
        help="how attnlab's step is compiled, each measured (regime.COMPILE_SHAPES; dynamic: attnlab train's)",
    )
    parser.add_argument("--profile", metavar="DIR", help="write DIR/profile_PRESET.txt: where a step's time goes")
    parser.add_argument("--json", action="store_true", help="one JSON object per preset on stdout")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="CPU, tiny model, 2 steps, eager (a CPU compile takes minutes): checks the script",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        device = torch.device("cpu")
        args.tokens, args.seq_len, args.steps, args.warmup, args.compile = 256, 16, 2, 1, "off"
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
            results = run_case(name, config, device, args, peak)
        except torch.cuda.OutOfMemoryError:
            print(f"{name}: out of GPU memory at {args.tokens} tokens; rerun with --update-freq 2", file=sys.stderr)
            torch.cuda.empty_cache()
            continue
        for result in results:
            report(result, args, device)
    return 0


def report(result: dict, args: argparse.Namespace, device: torch.device) -> None:
    """One row on stdout: a JSON object (`--json`) or three lines of prose."""
    if args.smoke:
        result["preset"] = f"{result['preset']} (smoke: tiny model)"
    if args.json:
        print(json.dumps(result), flush=True)
        return
    print(
        f"{result['preset']} ({result['variant']}): {result['params_millions']}M params, "
        f"{result['tgt_tokens_per_step']:,}+{result['tgt_tokens_per_step']:,} tokens/step, "
        f"step {result['step_s'] * 1e3:,.0f} ms, "
        f"{result['tgt_tokens_per_s']:,} target tokens/s, MFU {result['mfu']:.0%}, "
        f"peak memory {result['peak_memory_gib']:.1f} GiB, compile + warm-up {result['warmup_and_compile_s']} s"
        + (f", {result['host_waits_per_step']:g} host waits a step" if device.type == "cuda" else "")
        + "\n"
        f"  nn.Transformer: step {result['peer_step_s'] * 1e3:,.0f} ms, MFU {result['peer_mfu']:.0%}: "
        f"attnlab {result['ratio']:.2f}x\n"
        f"  {result['paper_steps']:,} steps here: {result['projected_hours']:,.1f} h on this device vs the paper's "
        f"{result['paper_hours']:g} h on {result['paper_gpus']} P100 ({result['speedup_vs_paper_wall']}x the "
        f"wall-clock speed, {result['speedup_vs_paper_per_gpu']}x per GPU)",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
