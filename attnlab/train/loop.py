"""`attnlab train`: the training regime of §5, as one explicit loop.

Adam(0.9, 0.98, 1e-9) with the learning rate of Eq. (3); label-smoothed cross-entropy
normalised by target tokens; token-budget batches (§5.1) with gradient accumulation
(`--update-freq`, how fewer devices emulate the paper's 8 GPUs); DistributedDataParallel under
`torchrun` (gloo on CPU, NCCL on GPU), each rank reading its own shard; atomic checkpoints that
resume exactly (weights, Adam moments, RNG, data position, log accumulators).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import load_tokenizer
from attnlab.errors import CheckpointError, ConfigError
from attnlab.model import checkpoint as ckpt
from attnlab.model.config import PRESETS, ModelConfig, parse_overrides, preset
from attnlab.model.flops import measure_matmul_peak, train_flops_per_target_token
from attnlab.model.transformer import Transformer, count_parameters
from attnlab.train.dev import dev_report
from attnlab.train.recipes import recipe
from attnlab.train.regime import learning_rate, make_loss, make_optimizer, training_kernels


@dataclass
class TrainConfig:
    """Everything about a run except the model; stored in every checkpoint."""

    data: str
    out: str
    preset: str = "base"
    overrides: dict[str, Any] = field(default_factory=dict)
    max_steps: int = 100_000  # base: 100k, big: 300k (§5.2)
    max_minutes: float = 0.0  # stop (and save) after this wall time; 0 = no limit
    save_every: int = 1000
    keep_last: int = 5  # the paper averages the last 5 (base) or 20 (big)
    seed: int = 1
    max_tokens: int = 4096  # per batch per rank; the paper's batches held ~25k + 25k tokens
    update_freq: int = 1
    warmup: int = 4000
    lr_scale: float = 1.0  # multiplies Eq. (3); small models on small data like 2
    clip_norm: float = 0.0  # the paper does not clip
    dtype: str = "auto"  # fp32 | bf16; auto = bf16 on CUDA, fp32 on CPU
    compile: bool = False
    log_every: int = 50
    eval_sentences: int = 200  # dev pairs for loss/PPL/BLEU at each checkpoint (0 = skip)
    probes: int = 4  # dev pairs recorded at each checkpoint for the explorer's timeline
    device: str = "auto"


def _distributed() -> tuple[int, int]:
    """(rank, world size); initialises the process group when run under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def _all_sum(value: float, world: int) -> float:
    if world == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item())


class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.rank, self.world = _distributed()
        self.device = torch.device(
            cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        )
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        dtype = cfg.dtype if cfg.dtype != "auto" else ("bf16" if self.device.type == "cuda" else "fp32")
        if dtype not in ("fp32", "bf16"):
            raise ConfigError(f"dtype must be fp32 or bf16, got {dtype!r}")
        self.autocast = dtype == "bf16"
        self.out = Path(cfg.out)
        self.spm_path = Path(cfg.data) / "spm.model"
        self.data = ParallelData(cfg.data, "train")
        self.meta = self.data.meta
        vocab = load_tokenizer(self.spm_path).get_piece_size()
        self.config: ModelConfig = preset(cfg.preset, **{"vocab_size": vocab, **cfg.overrides})
        if self.config.vocab_size != vocab:
            raise ConfigError(f"vocab_size={self.config.vocab_size} but the data's vocabulary has {vocab} pieces")
        torch.manual_seed(cfg.seed)
        self.model = Transformer(self.config).to(self.device)
        self.optimizer = make_optimizer(self.model)
        self.loss_fn = make_loss(cfg.compile)
        self.sampler = TokenBatchSampler(
            self.data.src_lens, self.data.tgt_lens, cfg.max_tokens, seed=cfg.seed, rank=self.rank, world_size=self.world
        )
        self.step = 0
        self.acc = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "batches": 0}  # since the last log line
        self.tensorboard: Any = None  # a SummaryWriter once needed, False when unavailable
        self.resumed_from = self._resume()
        self.net: torch.nn.Module = self.model
        if self.world > 1:
            self.net = torch.nn.parallel.DistributedDataParallel(self.model)
        if cfg.compile:
            self.net = torch.compile(self.net)
        # FLOPs at the corpus's mean lengths (+1 for </s> and <s>): attention grows with them
        src_len, tgt_len = (round(float(lens.mean())) + 1 for lens in (self.data.src_lens, self.data.tgt_lens))
        self.flops_per_token = train_flops_per_target_token(self.config, src_len, tgt_len)
        self.peak = measure_matmul_peak(torch.bfloat16 if self.autocast else torch.float32) if self.rank == 0 else 1.0

    # -- state -------------------------------------------------------------------------------
    def _state(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        tensors: dict[str, Tensor] = {"rng.cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            tensors["rng.cuda"] = torch.cuda.get_rng_state(self.device)
        opt = self.optimizer.state_dict()
        for index, state in opt["state"].items():
            for key, value in state.items():
                tensors[f"adam.{index}.{key}"] = value
        info = {
            "step": self.step,
            "sampler": self.sampler.state_dict(),
            "acc": self.acc,
            "train_config": dataclasses.asdict(self.cfg),
            "param_groups": opt["param_groups"],
        }
        return tensors, info

    def _resume(self) -> str | None:
        latest = ckpt.latest_valid(self.out)
        if latest is None:
            return None
        config, _ = ckpt.read_config(latest)
        if config != self.config:
            raise CheckpointError(f"{latest}: its model config differs from --preset/overrides; use another --out")
        model, _ = ckpt.load_model(latest, deep=False)
        self.model.load_state_dict(model.state_dict())
        tensors, info = ckpt.load_trainer_state(latest)
        state: dict[int, dict[str, Tensor]] = {}
        for name, value in tensors.items():
            if name.startswith("adam."):
                _, index, key = name.split(".", 2)
                state.setdefault(int(index), {})[key] = value.to(self.device) if key != "step" else value
        self.optimizer.load_state_dict({"state": state, "param_groups": info["param_groups"]})
        torch.set_rng_state(tensors["rng.cpu"])
        if "rng.cuda" in tensors and self.device.type == "cuda":
            torch.cuda.set_rng_state(tensors["rng.cuda"], self.device)
        self.sampler.load_state_dict(info["sampler"])
        self.step, self.acc = info["step"], info["acc"]
        if self.rank == 0:  # drop log lines the killed run wrote after this checkpoint
            metrics = self.out / "metrics.jsonl"
            if metrics.exists():
                kept = [line for line in metrics.read_text().splitlines() if json.loads(line)["step"] <= self.step]
                metrics.write_text("".join(line + "\n" for line in kept))
        return str(latest)

    def save(self) -> Path:
        tensors, info = self._state()
        path = self.out / "checkpoints" / f"step_{self.step}"
        meta = {"task": self.meta.get("task", "translate"), "data": self.meta, "step": self.step}
        ckpt.save_checkpoint(path, self.model, self.spm_path, tensors, info, meta=meta)
        ckpt.prune(self.out, self.cfg.keep_last)
        return path

    # -- the loop ----------------------------------------------------------------------------
    def batches(self):
        """Batches forever, epoch after epoch; the sampler's state is the exact position."""
        while True:
            for indices in self.sampler:
                yield collate(self.data, indices, self.config.pad_id, self.config.bos_id, self.config.eos_id)
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def train_step(self, micro: list[Batch]) -> None:
        """One update: gradients of Σ loss / (target tokens over all micro-batches and ranks)."""
        cfg = self.cfg
        total_tokens = _all_sum(float(sum(b.n_tgt_tokens for b in micro)), self.world)
        lr = learning_rate(self.step + 1, self.config.d_model, cfg.warmup, cfg.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        for i, batch in enumerate(micro):
            sync = i == len(micro) - 1 or self.world == 1
            context = contextlib.nullcontext() if sync else self.net.no_sync()
            with (
                context,
                training_kernels(self.device.type, self.autocast),
                torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast),
            ):
                logits = self.net(batch.src.to(self.device), batch.tgt_in.to(self.device))
                loss, nll = self.loss_fn(logits, batch.tgt_out.to(self.device), self.config.eps_ls, self.config.pad_id)
                # DDP averages gradients over ranks; ×world makes the result a sum over all tokens.
                (loss * self.world / total_tokens).backward()
            self.acc["loss"] += loss.item()
            self.acc["nll"] += nll.item()
            self.acc["tokens"] += batch.n_tgt_tokens
            self.acc["batches"] += 1
        if cfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
        self.optimizer.step()
        self.step += 1

    def log(self, record: dict[str, Any]) -> None:
        """One JSON line per interval in RUN_DIR/metrics.jsonl, and TensorBoard events when the
        tensorboard package is installed (it is optional)."""
        if self.rank != 0:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        with (self.out / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        if self.tensorboard is None:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional: tensorboard is not a dependency

                self.tensorboard = SummaryWriter(str(self.out / "tensorboard"))
            except ImportError:
                self.tensorboard = False
        if self.tensorboard:
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key, value, record["step"])
            self.tensorboard.flush()

    def run(self) -> Path | None:
        cfg = self.cfg
        start = time.time()
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            print(
                f"attnlab train: {cfg.preset} {count_parameters(self.model) / 1e6:.1f}M params, "
                f"{len(self.data):,} pairs, {self.world} process(es), update_freq {cfg.update_freq}, "
                f"{'bf16' if self.autocast else 'fp32'} on {self.device}"
                + (f"; resumed from {self.resumed_from}" if self.resumed_from else ""),
                file=sys.stderr,
            )
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=self.rank != 0, dynamic_ncols=True, file=sys.stderr)
        stream = self.batches()
        window_start, window_tokens, last_saved = time.time(), 0.0, None
        while self.step < cfg.max_steps:
            micro = [next(stream) for _ in range(cfg.update_freq)]
            tokens_before = self.acc["tokens"]
            self.train_step(micro)
            window_tokens += (self.acc["tokens"] - tokens_before) * self.world
            bar.update(1)
            if self.step % cfg.log_every == 0 and self.acc["tokens"]:
                elapsed = time.time() - window_start
                tps = window_tokens / max(elapsed, 1e-9)
                loss = self.acc["loss"] / self.acc["tokens"]
                nll = self.acc["nll"] / self.acc["tokens"]
                record = {
                    "step": self.step,
                    "loss": loss,
                    "nll": nll,
                    "ppl": math.exp(min(nll, 50)),
                    "lr": self.optimizer.param_groups[0]["lr"],
                    "tokens_per_s": tps,
                    "mfu": tps * self.flops_per_token / (self.peak * self.world),
                    "wall_s": time.time() - start,
                }
                self.log(record)
                bar.set_postfix(
                    loss=f"{loss:.3f}", lr=f"{record['lr']:.2e}", tok_s=f"{tps:,.0f}", mfu=f"{record['mfu']:.0%}"
                )
                self.acc = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "batches": 0}
                window_start, window_tokens = time.time(), 0.0
            out_of_time = cfg.max_minutes > 0 and time.time() - start > cfg.max_minutes * 60
            if self.step % cfg.save_every == 0 or self.step == cfg.max_steps or out_of_time:
                if self.rank == 0:
                    last_saved = self.save()
                    self.evaluate(last_saved)
                if self.world > 1:
                    dist.barrier()
                if out_of_time:
                    break
        bar.close()
        if self.world > 1:
            dist.destroy_process_group()
        return last_saved

    def evaluate(self, checkpoint_dir: Path) -> None:
        """Dev loss/PPL (and BLEU once decoding exists) plus probe traces for the timeline."""
        if self.cfg.eval_sentences <= 0 and self.cfg.probes <= 0:
            return
        report = dev_report(self.model, self.cfg.data, checkpoint_dir, self.out, self.step, self.cfg)
        if report:
            self.log({"step": self.step, **report})
            print(
                f"\nstep {self.step}: " + ", ".join(f"{k} {v:.3f}" for k, v in report.items() if isinstance(v, float)),
                file=sys.stderr,
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnlab train",
        description=__doc__.split("\n\n")[0],
        epilog="Extra KEY=VALUE arguments override the preset (e.g. p_drop=0.3 n_layers=3).",
    )
    parser.add_argument("--preset", choices=list(PRESETS), help="model preset (default: base)")
    parser.add_argument("--recipe", help="a named recipe (see attnlab.train.recipes) that fills in every other option")
    parser.add_argument("--data", help="a directory written by `attnlab data prepare`")
    parser.add_argument("--out", help="run directory (checkpoints, metrics.jsonl); an existing one resumes")
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("data", "out", "preset", "overrides"):
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=None)
        else:
            parser.add_argument(flag, type=type(f.default), default=None)
    return parser


def config_from_args(argv: list[str]) -> TrainConfig:
    args, rest = build_parser().parse_known_args(argv)
    values: dict[str, Any] = {}
    if args.recipe:
        values.update(recipe(args.recipe))
    overrides = dict(values.pop("overrides", {}))
    overrides.update(parse_overrides(rest))
    for key, value in vars(args).items():
        if key != "recipe" and value is not None:
            values[key] = value
    if not values.get("data") or not values.get("out"):
        raise ConfigError("--data and --out are required (or --recipe NAME)")
    return TrainConfig(**values, overrides=overrides)


def cli(argv: list[str]) -> int:
    cfg = config_from_args(argv)
    trainer = Trainer(cfg)
    last = trainer.run()
    if trainer.rank == 0 and last is not None:
        print(f"last checkpoint: {last}", file=sys.stderr)
    return 0
