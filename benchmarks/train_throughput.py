"""Training throughput: attnlab against `torch.nn.Transformer` built to the same model.

One full training step — forward, label-smoothed loss (§5.4), backward, Adam(0.9, 0.98, 1e-9) —
on the same batch of real Multi30k sentences, in the same precision, for attnlab's `Transformer`
and for a peer built from `torch.nn.Transformer` with the paper's surroundings: one shared
embedding matrix (source, target, pre-softmax projection) scaled by √d_model, sinusoidal
positions, embedding dropout. The peer is made mathematically identical to attnlab's model: its
attention-weight dropout and its dropout inside the feed-forward block (neither is in the paper)
are switched off, and the extra final LayerNorms `nn.Transformer` adds after its post-norm stacks
are removed; the script checks that both have the same number of parameters. Both call the same
`attnlab.train.label_smoothed_loss`; attnlab's side takes the trainer's own update
(`attnlab.train.update.Update`, without gradient accumulation and DDP). Each runs in a process
of its own, as a user runs it (`common.Worker`: in one shared process each slowed the other, attnlab
more than the peer), and the two are timed alternately, so a load burst from another job hits
both; the figure to quote is the ratio.

attnlab's side runs what `attnlab train` runs by default on the device for a long run
(`--compile auto`: on a CPU the compiled loss, and the compiled model too in bf16, see
`attnlab.train.regime.compile_mode`; `--smoke` compiles the loss only, to stay quick), and each
process keeps freed memory as `attnlab train` does (`keep_freed_memory`), the peer's too, so the
ratio compares code, not allocators.

Model FLOP utilisation (MFU) is `tokens/s × attnlab.model.flops.train_flops_per_target_token` over the
matrix-multiply peak in the same precision: the fastest 2048³ product, measured before each
case, the highest so far kept (`common.matmul_peak`).

    .venv/bin/python benchmarks/train_throughput.py --presets small base --dtypes fp32 bf16
    .venv/bin/python benchmarks/train_throughput.py --device cuda --max-tokens 8192 --json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from common import (
    Worker,
    add_clock_argument,
    clock,
    machine,
    matmul_peak,
    median,
    prepared_multi30k,
    synchronize,
    without_emulated_bf16,
)
from torch import Tensor, nn

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.prepared import ParallelData
from attnlab.model.config import ModelConfig, preset
from attnlab.model.embedding import sinusoidal_positions
from attnlab.model.flops import train_flops_per_target_token
from attnlab.model.memory import keep_freed_memory
from attnlab.model.transformer import Transformer, count_parameters
from attnlab.train.regime import (
    COMPILE_MODES,
    COMPILE_PAYS_FROM,
    compile_mode,
    compile_model,
    label_smoothed_loss,
    make_loss,
    make_optimizer,
)
from attnlab.train.update import Update, stage

# The peer's attention projections have biases (nn.MultiheadAttention): attnlab's are timed with
# them too, so that both run the same maths (the paper's, and attnlab's presets, have none).
PEER_SHAPE = {"attn_bias": True}


class TorchTransformerMT(nn.Module):
    """The peer: `torch.nn.Transformer` inside the paper's embedding and output layers (§3.4,
    §3.5), with the same dropout sites as attnlab (residual and embedding dropout only, §5.4)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        nn.init.normal_(self.embed.weight, 0.0, config.d_model**-0.5)
        self.register_buffer("pe", sinusoidal_positions(config.max_len, config.d_model), persistent=False)
        self.dropout = nn.Dropout(config.p_drop)
        self.core = nn.Transformer(
            config.d_model,
            config.n_heads,
            config.n_layers,
            config.n_layers,
            config.d_ff,
            config.p_drop,
            batch_first=True,
            norm_first=False,
        )
        # A post-norm stack already ends in a LayerNorm; nn.Transformer adds another (not the paper's).
        self.core.encoder.norm = None
        self.core.decoder.norm = None
        for module in self.core.modules():
            if isinstance(module, nn.MultiheadAttention):
                module.dropout = 0.0  # no dropout on attention weights in the paper
            elif isinstance(module, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
                module.dropout = nn.Identity()  # nor between the two feed-forward layers

    def embed_tokens(self, ids: Tensor) -> Tensor:
        return self.dropout(self.embed(ids) * math.sqrt(self.config.d_model) + self.pe[: ids.size(1)])

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """src (B, Ls), tgt (B, Lt) decoder inputs -> logits (B, Lt, V), as attnlab's forward."""
        src_pad = src.eq(self.config.pad_id)  # True = ignore, nn.Transformer's convention
        length = tgt.size(1)
        causal = torch.ones(length, length, dtype=torch.bool, device=tgt.device).triu(1)
        hidden = self.core(
            self.embed_tokens(src),
            self.embed_tokens(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_is_causal=True,
        )
        return F.linear(hidden, self.embed.weight)


def median_batch(data_dir: Path, max_tokens: int) -> Batch:
    """The middle batch of the length-sorted token-budget batches (§5.1): sentences of median
    length, padded as the trainer pads them."""
    data = ParallelData(data_dir, "train")
    sampler = TokenBatchSampler(data.src_lens, data.tgt_lens, max_tokens, shuffle=False)
    batches = list(sampler)
    return collate(data, batches[len(batches) // 2])


def make_step(
    model: nn.Module, batch: Batch, bf16: bool, device: torch.device, ours: bool, compile: str = "off"
) -> Callable[[], None]:
    """One update on `batch`. attnlab's side (`ours`) is the trainer's own update
    (`attnlab.train.update.Update`: its optimizer, kernels, loss function and compile mode "off",
    "loss" or "model", see `regime.compile_mode`; the gradient norm and the finiteness check,
    one read back), on the batch staged once; the peer: zero grads, forward (logits for every
    position, padding masked in the loss) and the eager loss under autocast, backward of the loss per target token, the loss read back (as a training loop
    logs it), a plain Adam, as a user of nn.Transformer would write it."""
    config = model.config
    if ours:
        optimizer = make_optimizer(model)
        for group in optimizer.param_groups:
            group["lr"] = 1e-4
        net = compile_model(model) if compile == "model" else model
        update = Update(net, model, optimizer, make_loss(compile != "off"), autocast=bf16)
        staged = [stage(batch, model, device, check_ids=compile == "model")]

        def update_step() -> None:
            update(staged, batch.n_tgt_tokens, [0])

        return update_step
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt_in, tgt_out = batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)

    def step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            loss, nll = label_smoothed_loss(model(src, tgt_in), tgt_out, config.eps_ls, config.pad_id)
            (loss / batch.n_tgt_tokens).backward()
        loss.item()
        nll.item()
        optimizer.step()

    return step


def seconds_per_step(
    step: Callable[[], None], device: torch.device, now: Callable[[], float], min_seconds: float, min_steps: int
) -> float:
    """Run `step` at least `min_steps` times and for at least `min_seconds`; mean seconds each."""
    synchronize(device)
    start, steps = now(), 0
    while steps < min_steps or now() - start < min_seconds:
        step()
        synchronize(device)
        steps += 1
    return (now() - start) / steps


def system_step(
    name: str, dtype: str, data_dir: str, max_tokens: int, device: str, ours: bool, args: argparse.Namespace
) -> Callable[[], float]:
    """One system's update on the median batch, built in a `Worker`'s process and warmed up there
    (`args.warmup` untimed steps: the first allocate Adam's moments and autocast's weight casts,
    compile, and a process's heap settles only after two steps, ~170k page faults in the second
    on base); each call then times steps for at least `args.min_seconds` and returns the mean
    seconds a step."""
    where = torch.device(device)
    batch = median_batch(Path(data_dir), max_tokens)
    torch.manual_seed(0)
    model = (Transformer if ours else TorchTransformerMT)(preset(name, **PEER_SHAPE)).to(where)
    step = make_step(model, batch, dtype == "bf16", where, ours, args.compile_modes[dtype] if ours else "off")
    for _ in range(args.warmup):
        step()
    now = clock(args.clock)
    return lambda: seconds_per_step(step, where, now, args.min_seconds, args.min_steps)


def measure_case(
    name: str, dtype: str, data_dir: Path, batch: Batch, device: torch.device, args: argparse.Namespace, peak: float
) -> dict[str, object]:
    """Both systems on one (preset, precision), each in a process of its own (`common.Worker`):
    built and warmed one after the other, then `repeats` alternating timings."""
    config = preset(name, **PEER_SHAPE)
    with torch.device("meta"):
        counts = count_parameters(Transformer(config)), count_parameters(TorchTransformerMT(config))
    if counts[0] != counts[1]:
        raise SystemExit(f"{name}: attnlab has {counts[0]} parameters, the peer {counts[1]}")
    systems = {
        system: Worker(system_step, name, dtype, str(data_dir), args.max_tokens, str(device), system == "attnlab", args)
        for system in ("attnlab", "peer")
    }
    times: dict[str, list[float]] = {"attnlab": [], "peer": []}
    try:
        for repeat in range(args.repeats):
            order = ["attnlab", "peer"] if repeat % 2 == 0 else ["peer", "attnlab"]  # ABBA: no side always goes first
            for system in order:
                times[system].append(systems[system]())
    finally:
        for worker in systems.values():
            worker.close()
    src_len = batch.src.ne(config.pad_id).sum().item() / batch.src.size(0)
    tgt_len = batch.n_tgt_tokens / batch.src.size(0)
    flops_per_token = train_flops_per_target_token(config, round(src_len), round(tgt_len))
    ours_tps = batch.n_tgt_tokens / median(times["attnlab"])
    peer_tps = batch.n_tgt_tokens / median(times["peer"])
    return {
        "preset": name,
        "dtype": dtype,
        "device": device.type,
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "compile": args.compile_modes[dtype],
        "attnlab_tokens_per_s": round(ours_tps, 1),
        "peer_tokens_per_s": round(peer_tps, 1),
        "ratio": round(ours_tps / peer_tps, 3),
        "attnlab_mfu": round(ours_tps * flops_per_token / peak, 3),
        "peer_mfu": round(peer_tps * flops_per_token / peak, 3),
        "matmul_peak_gflops": round(peak / 1e9, 1),
        "attnlab_step_s": [round(t, 4) for t in times["attnlab"]],
        "peer_step_s": [round(t, 4) for t in times["peer"]],
        "batch": {"sentences": batch.src.size(0), "src_shape": list(batch.src.shape), "tgt_tokens": batch.n_tgt_tokens},
        "params": counts[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["small", "base"])
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=["fp32", "bf16"],
        help="default: fp32 and bf16 (fp32 alone on a CPU without bf16 products, where bf16 is emulated)",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--data", help="a prepared Multi30k directory (default: prepare one into a temp dir)")
    parser.add_argument("--max-tokens", type=int, default=2048, help="token budget of the batch, each side")
    # five, not three: one timing of a side can be 1.4x its others (the peer's base bf16 step:
    # 3.65, 3.79, 5.06 s in training round ten): two such timings move a median of three, three one of five
    parser.add_argument("--repeats", type=int, default=5, help="alternating timings per system (the median is quoted)")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="each timing runs steps for at least this")
    parser.add_argument("--min-steps", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per system first")
    add_clock_argument(parser)
    parser.add_argument(
        "--compile",
        default="auto",
        choices=COMPILE_MODES,
        help="attnlab's compile mode, as `attnlab train --compile` (default auto: what a long run uses)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per case on stdout")
    parser.add_argument("--smoke", action="store_true", help="tiny preset, tiny batch, 2 steps: checks the script runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.presets, args.max_tokens, args.repeats, args.min_seconds, args.min_steps = ["tiny"], 256, 1, 0.0, 2
    device = torch.device(args.device)
    if args.dtypes is None:
        args.dtypes = without_emulated_bf16(["fp32", "bf16"], device, keep=args.smoke)
    # What `attnlab train` does on this device by default for a long run (the paper's 100k updates)
    steps = COMPILE_PAYS_FROM if args.smoke else 100_000
    decided = {dtype: compile_mode(args.compile, device.type, steps, bf16=dtype == "bf16") for dtype in args.dtypes}
    args.compile_modes = {dtype: mode for dtype, (mode, _) in decided.items()}
    note = "; ".join(f"{dtype}: {line}" for dtype, (_, line) in decided.items())
    if device.type == "cpu" and keep_freed_memory():  # each system's process sets it too (`Worker`)
        note += "; glibc keeps freed memory (mallopt), for both systems; each system in a process of its own"
    if args.clock == "cpu" and device.type != "cpu":
        parser.error("--clock cpu times the host, not a GPU; use the wall clock with --device cuda")
    # Multi30k's bundled 8k BPE, smaller when a preset's embedding is smaller (tiny: 1,000 ids)
    vocab = min(8000, *(preset(name).vocab_size for name in args.presets))
    data_dir = prepared_multi30k(args.data, vocab)
    data_vocab = ParallelData(data_dir, "train").meta["vocab_size"]
    if data_vocab > vocab:
        raise SystemExit(f"{data_dir} has a vocabulary of {data_vocab}; the presets need at most {vocab}")
    batch = median_batch(data_dir, args.max_tokens)
    print(f"# {machine(device, args.clock)}", file=sys.stderr)
    print(f"# attnlab {note}", file=sys.stderr)
    print(
        f"# batch: {batch.src.size(0)} Multi30k pairs, source {tuple(batch.src.shape)}, target "
        f"{tuple(batch.tgt_in.shape)}, {batch.n_tgt_tokens} target tokens",
        file=sys.stderr,
    )

    def peak(dtype: str) -> float:
        # (an emulated bf16 product of 2,048² takes 49 s); a GPU needs larger ones to reach its
        # peak: on an H200, 455 TFLOP/s at 2,048³, 789 at 8,192³ (docs/BENCHMARKS.md, GPU round one)
        size = 256 if args.smoke else 8192 if device.type == "cuda" else 2048
        return matmul_peak(torch.bfloat16 if dtype == "bf16" else torch.float32, device, clock(args.clock), size)

    peaks: dict[str, float] = {}
    for name in args.presets:
        for dtype in args.dtypes:
            # measured before each case, the highest so far kept: a neighbour's load can
            # depress a whole second of products (bf16: 214 GFLOP/s against 380-398 moments
            # apart, training round eleven), and MFU over a depressed peak flatters both sides
            peaks[dtype] = max(peaks.get(dtype, 0.0), peak(dtype))
            print(f"# {dtype} matmul peak so far: {peaks[dtype] / 1e9:,.0f} GFLOP/s", file=sys.stderr)
            result = measure_case(name, dtype, data_dir, batch, device, args, peaks[dtype])
            if args.json:
                print(json.dumps(result), flush=True)
            else:
                print(
                    f"{name:<6} {dtype:<5} attnlab {result['attnlab_tokens_per_s']:>8,.0f} tok/s "
                    f"(MFU {result['attnlab_mfu']:.0%})   nn.Transformer {result['peer_tokens_per_s']:>8,.0f} tok/s "
                    f"(MFU {result['peer_mfu']:.0%})   ratio {result['ratio']:.2f}x",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
