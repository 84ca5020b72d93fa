"""`attnlab train`: the training regime of §5, as one explicit loop.

Adam(0.9, 0.98, 1e-9) with the learning rate of Eq. (3); label-smoothed cross-entropy
normalised by target tokens; token-budget batches (§5.1) with gradient accumulation
(`--update-freq`, how fewer devices emulate the paper's 8 GPUs); DistributedDataParallel under
`torchrun` (gloo on CPU, NCCL on GPU), where W ranks train like one process with `--update-freq W`
(same micro-batches, normaliser and dropout masks; a run resumes in either shape); checkpoints that
resume exactly (weights, Adam moments, RNG, data position, log accumulators); faults survived
(attnlab.train.guard): SIGTERM, a full disk, a non-finite loss.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.distributed as dist
from torch import Tensor
from tqdm import tqdm

from attnlab.data.batching import Batch, TokenBatchSampler, collate
from attnlab.data.prepared import ParallelData
from attnlab.data.tokenizer import load_tokenizer
from attnlab.errors import CheckpointError, ConfigError
from attnlab.model import checkpoint as ckpt
from attnlab.model.config import ModelConfig, preset, resolve_device
from attnlab.model.flops import measure_matmul_peak, train_flops_per_target_token
from attnlab.model.memory import keep_freed_memory
from attnlab.model.transformer import count_parameters
from attnlab.train import startup
from attnlab.train.dev import dev_report
from attnlab.train.guard import SKIPS_IN_A_ROW, DeferredStop, TrainingError
from attnlab.train.metrics import MetricsLog
from attnlab.train.ranks import agree, all_sum, distributed, micro_seed
from attnlab.train.regime import compile_mode, compile_model, learning_rate, make_loss
from attnlab.train.resume import changed_update_rule, check_same_model, has_dev_record, resumable, tidy
from attnlab.train.startup import build, check_align_gold, check_fits, check_lengths, check_out, notes, tokens_line
from attnlab.train.update import DeviceBatch, Next, Update, stage


@dataclass
class TrainConfig:
    """Everything about a run except the model; stored in every checkpoint."""

    data: str
    out: str
    preset: str = "base"
    overrides: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None  # None: the preset's (`preset_defaults`: base 100k, big 300k, §5.2)
    max_minutes: float = 0.0  # stop (and save) after this wall time; 0 = no limit
    save_every: int = 1000
    keep_last: int | None = None  # None: what the paper averages, the last 5 (base) or 20 (big); else 5
    seed: int = 1
    max_tokens: int | None = None  # per rank and micro-batch, a side; None: ~25k an update for Table 3, else 4096
    update_freq: int = 1
    warmup: int = 4000
    lr_scale: float = 1.0  # multiplies Eq. (3); small models on small data like 2
    clip_norm: float = 0.0  # the paper does not clip
    dtype: str = "auto"  # fp32 | bf16; auto = bf16 on CUDA, fp32 on CPU
    compile: str = "auto"  # off | loss | model (and loss) | auto: where it pays (`regime.compile_mode`)
    log_every: int = 50
    eval_sentences: int = 200  # dev pairs for loss/PPL/BLEU at each checkpoint (0 = skip)
    probes: int = 4  # dev pairs recorded at each checkpoint for the explorer's timeline
    align_gold: str = ""  # a human alignment set (e.g. zhen_dev): every head's AER at each checkpoint
    align_pairs: int = 100  # ... on its first pairs (0: all) (scoring every head costs ~0.5 s a pair on a CPU)
    device: str = "auto"
    skip_nonfinite: bool = False  # skip (and count) an update whose loss or gradient is nan/inf; default: stop

    def __post_init__(self) -> None:
        startup.check_settings(self)  # paths, strings, a dict of overrides: JSON a checkpoint can store
        startup.fill_defaults(self)
        startup.check_numbers(self)


class Trainer:
    """One run: `Trainer(TrainConfig(data=PREPARED, out=RUN_DIR, preset="small"), log=sys.stdout).run()`."""

    def __init__(self, cfg: TrainConfig, log: TextIO | None = None) -> None:
        if not isinstance(cfg, TrainConfig):  # (None was a TypeError from dataclasses.asdict)
            raise ConfigError(f"Trainer takes a TrainConfig (its preset names the model), got {type(cfg).__name__}")
        cfg = dataclasses.replace(cfg)  # a copy checked again, as built: a field set since is refused here too
        self.cfg, self.log = cfg, log or sys.stderr  # where the log goes (a notebook: sys.stdout, not red)
        self.rank, self.world = distributed()
        agree(dataclasses.asdict(cfg), self.world)
        self.device = resolve_device(cfg.device)
        if self.device.type == "cuda" and self.world > 1:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
            torch.cuda.set_device(self.device)
        self.autocast = cfg.dtype == "bf16" or (cfg.dtype == "auto" and self.device.type == "cuda")
        self.out = Path(cfg.out)
        self.spm_path = Path(cfg.data) / "spm.model"
        self.data = ParallelData(cfg.data, "train")
        self.meta = self.data.meta
        vocab = load_tokenizer(self.spm_path).get_piece_size()
        self.config: ModelConfig = preset(cfg.preset, **{"vocab_size": vocab, **cfg.overrides})
        if self.config.vocab_size != vocab:
            raise ConfigError(f"vocab_size={self.config.vocab_size} but the data's vocabulary has {vocab} pieces")
        if cfg.align_gold:
            check_align_gold(cfg.align_gold, self.meta)
        self.data.check()
        check_lengths(self.data, cfg, self.config)
        # before --out and the model: a pair over --max-tokens, or too few pairs for the update's
        # micro-batches, was refused after both (an empty run directory left behind)
        shape = {
            "rank": self.rank,
            "world_size": self.world,
            "update_freq": cfg.update_freq,
        }  # a resume keeps W·F only
        self.sampler = TokenBatchSampler(self.data.src_lens, self.data.tgt_lens, cfg.max_tokens, cfg.seed, **shape)
        params = check_fits(self.config, self.device)
        if self.rank == 0:
            check_out(self.out)
        torch.manual_seed(cfg.seed)
        self.model, self.optimizer = build(self.config, self.device, params)
        self.compile, note = compile_mode(cfg.compile, self.device.type, cfg.max_steps, bf16=self.autocast)
        if self.rank == 0:
            print("\n".join(filter(None, (note, *notes(cfg, self.config, self.device, self.autocast)))), file=self.log)
        if self.device.type == "cpu":
            keep_freed_memory()
        self.loss_fn = make_loss(self.compile != "off")
        self.step = 0
        self.saved_step: int | None = None  # step of the newest checkpoint on disk
        self.skipped = self.in_a_row = 0  # updates skipped for a non-finite loss (--skip-nonfinite); in a row
        self.wall_before = 0.0  # seconds the run trained before this process (resumed)
        self.stopped_by: signal.Signals | str | None = None  # SIGTERM, SIGINT or "time" (--max-minutes)
        self.window_start, self.window_tokens = time.time(), 0.0  # for tokens/s since the last log line
        self.acc = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "batches": 0}  # since the last log line (all ranks)
        self.metrics = MetricsLog(self.out)
        self.position: dict[str, Any] | None = None  # the data position before the staged batches
        self.resumed_from = self._resume()
        self.origin = time.time() - self.wall_before  # run() sets it again; save() before run() needs it
        self.net: torch.nn.Module = self.model
        if self.world > 1:
            self.net = torch.nn.parallel.DistributedDataParallel(self.model)
        if self.compile == "model":
            self.net = compile_model(self.net)
        self.update = Update(
            self.net, self.model, self.optimizer, self.loss_fn, self.autocast, self.world, cfg.clip_norm
        )
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
            "sampler": self.position if self.position is not None else self.sampler.state_dict(),
            "acc": self.acc,
            "skipped": self.skipped,
            "wall_s": time.time() - self.origin,
            "train_config": dataclasses.asdict(self.cfg),
            "precision": "bf16" if self.autocast else "fp32",  # what "auto" meant on this device
            "param_groups": opt["param_groups"],
        }
        return tensors, info

    def _resume(self) -> str | None:
        latest = resumable(self.out)
        if latest is None:
            if self.rank == 0:  # a run killed before its first checkpoint starts over, log included
                tidy(self.out, self.metrics, 0)
            return None
        check_same_model(latest, ckpt.read_config(latest)[0], self.config, self.spm_path)
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
        self.step, self.acc, self.skipped = info["step"], info["acc"], info.get("skipped", 0)
        self.wall_before = info.get("wall_s", 0.0)
        self.saved_step = self.step
        if self.rank == 0:  # drop log lines the killed run wrote after this checkpoint, and its half-written one
            tidy(self.out, self.metrics, self.step)
            mine = {**dataclasses.asdict(self.cfg), "precision": "bf16" if self.autocast else "fp32"}
            changed = changed_update_rule(info, mine)
            if changed:
                print(f"attnlab train: resuming with {changed}: the run's trajectory changes here", file=self.log)
        return str(latest)

    def checkpoint(self) -> Path | None:
        """Rank 0 saves and evaluates while the others wait; the checkpoint's path on rank 0."""
        path = None
        if self.rank == 0:
            path = self.save()
            self.saved_step = self.step  # published: a rank lost from here on must name this one
            self.evaluate(path)
        if self.world > 1:
            dist.barrier()
        self.saved_step = self.step  # on every rank: they decide alike whether a stop must save
        return path

    def save(self) -> Path:
        tensors, info = self._state()
        path = self.out / "checkpoints" / f"step_{self.step}"
        meta = {"task": self.meta.get("task", "translate"), "data": self.meta, "step": self.step}
        try:
            ckpt.save_checkpoint(path, self.model, self.spm_path, tensors, info, meta=meta)
        except CheckpointError as error:
            then = "run the same command to resume" if self.saved_step else "none saved yet: rerun to start over"
            raise CheckpointError(f"{error}; stopped at step {self.step}, {then}") from error
        ckpt.prune(self.out, self.cfg.keep_last)  # only once the new checkpoint is published
        return path

    # -- the loop ----------------------------------------------------------------------------
    def batches(self) -> Iterator[Batch]:
        """Batches forever, epoch after epoch; the sampler's state is the exact position."""
        while True:
            for indices in self.sampler:
                yield collate(self.data, indices, self.config.pad_id, self.config.bos_id, self.config.eos_id)
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def staged(self, batch: Batch) -> DeviceBatch:
        """`batch` checked (here, when the compiled graph skips the model's checks) and on its way
        to the device."""
        return stage(batch, self.model, self.device, check_ids=self.compile == "model")

    def next_update(self, stream: Iterator[Batch]) -> list[DeviceBatch]:
        """The next update's micro-batches, staged while the device still runs the last one. A
        checkpoint written before they are trained must resume at them: the position comes first."""
        self.position = self.sampler.state_dict()
        return [self.staged(next(stream)) for _ in range(self.cfg.update_freq)]

    def train_step(self, micro: list[DeviceBatch], then: Callable[[], Next] | None = None) -> tuple[bool, Next | None]:
        """One update from this rank's micro-batches (`Update`); (False, …) when it was skipped
        (non-finite), and what `then` made while the device worked.

        The gradient is Σ loss / (target tokens of all W·F micro-batches of the update), as one
        process with update_freq W·F computes it. Micro-batch i of rank r is the update's global
        micro-batch g = i·W + r (see TokenBatchSampler), and its dropout masks come from
        `micro_seed(g)`.
        """
        cfg = self.cfg
        (total_tokens,) = all_sum([float(sum(b.tokens for b in micro))], self.world)
        lr = learning_rate(self.step + 1, self.config.d_model, cfg.warmup, cfg.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        seeds = [micro_seed(cfg.seed, self.step, i * self.world + self.rank) for i in range(len(micro))]
        out = self.update(micro, total_tokens, seeds, then)
        if not out.finite:  # the device left weights and Adam's state as they were
            self.skipped, self.in_a_row = self.skipped + 1, self.in_a_row + 1
            if not cfg.skip_nonfinite or self.in_a_row >= SKIPS_IN_A_ROW:
                last = f"step_{self.saved_step}" if self.saved_step is not None else "none yet"
                raise TrainingError(
                    f"step {self.step + 1}: loss {out.loss} and gradient norm {out.norm} are not finite"
                    + (f" for {self.in_a_row} updates in a row, all skipped" if cfg.skip_nonfinite else "")
                    + f"; stopped before updating (last checkpoint: {last}, untouched); lower --lr-scale"
                    + ("" if cfg.skip_nonfinite else ", or pass --skip-nonfinite to skip such updates")
                )
            return False, out.then
        self.in_a_row = 0
        self.step += 1
        self.acc["loss"] += out.loss
        self.acc["nll"] += out.nll
        self.acc["tokens"] += total_tokens
        self.acc["batches"] += len(micro) * self.world
        return True, out.then

    def run(self) -> Path | None:
        """Train until --max-steps, --max-minutes or SIGTERM, saving every --save-every steps and at the end; the last
        checkpoint written. The ranks agree on when to stop (none waits in an all-reduce); rank 0 holds --out."""
        if self.step >= self.cfg.max_steps:  # (a notebook's run drew a bare "40it" progress bar, and stopped)
            print(f"attnlab train: at step {self.step} of max_steps {self.cfg.max_steps}: nothing to do", file=self.log)
            return None
        with startup.holding(self.out) if self.rank == 0 else nullcontext():
            return self._train()

    def _train(self) -> Path | None:
        cfg = self.cfg
        start = time.time()
        self.origin = start - self.wall_before  # the log's wall_s counts on from the checkpoint's
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            print(
                f"attnlab train: {cfg.preset} {count_parameters(self.model) / 1e6:.1f}M params, "
                f"{len(self.data):,} pairs, {'bf16' if self.autocast else 'fp32'} on {self.device}; "
                + tokens_line(cfg, self.world)
                + (f"; resumed from {self.resumed_from}" if self.resumed_from else ""),
                file=self.log,
            )
        redo = self.resumed_from and cfg.eval_sentences > 0 and self.rank == 0  # killed while evaluating it?
        if redo and not has_dev_record(self.metrics.path, self.step):
            self.evaluate(Path(self.resumed_from))
        quiet = 1.0 if self.log.isatty() else 60.0  # off a terminal every refresh is another line in a log
        bar = tqdm(total=cfg.max_steps, initial=self.step, disable=self.rank != 0, mininterval=quiet, file=self.log)
        stream = self.batches()
        self.window_start, self.window_tokens = time.time(), 0.0
        last_saved = None
        with bar, DeferredStop() as stop:  # the bar ends its line also on an error, which then starts its own
            staged = self.next_update(stream)
            while self.step < cfg.max_steps:
                tokens_before = self.acc["tokens"]
                applied, staged = self.train_step(staged, lambda: self.next_update(stream))
                self.window_tokens += self.acc["tokens"] - tokens_before
                if applied:
                    bar.update(1)
                    if (self.step % cfg.log_every == 0 or self.step == cfg.max_steps) and self.acc["tokens"]:
                        bar.set_postfix(self.log_interval())
                if applied and (self.step % cfg.save_every == 0 or self.step == cfg.max_steps):
                    paused = time.time()
                    last_saved = self.checkpoint() or last_saved
                    self.window_start += time.time() - paused  # saving and the dev set are not training's speed
                out_of_time = cfg.max_minutes > 0 and time.time() - start > cfg.max_minutes * 60
                asked = (out_of_time, stop.requested == signal.SIGTERM, stop.requested == signal.SIGINT)
                late, terminated, interrupted = all_sum([float(a) for a in asked], self.world)
                if late or terminated or interrupted:
                    if self.step != self.saved_step:
                        last_saved = self.checkpoint() or last_saved
                    self.stopped_by = signal.SIGINT if interrupted else signal.SIGTERM if terminated else "time"
                    break
        if self.world > 1:
            # DDP's reducer holds the process group and its last work: let them go now, not at exit, where freeing
            # them aborted rank 0 in 2 of 6 DDP test runs (SIGABRT, "terminate called without an active exception")
            self.net = self.update.net = self.model
            gc.collect()
            dist.destroy_process_group()
        return last_saved

    def log_interval(self) -> dict[str, str]:
        """Log the interval's means (all ranks' tokens), reset them; the progress bar's summary."""
        tps = self.window_tokens / max(time.time() - self.window_start, 1e-9)
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
            "skipped_updates": self.skipped,
            "wall_s": time.time() - self.origin,
        }
        if self.rank == 0:
            self.metrics.write(record)
        self.acc = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "batches": 0}
        self.window_start, self.window_tokens = time.time(), 0.0
        return {
            "loss": f"{loss:.3f}",
            "lr": f"{record['lr']:.2e}",
            "tok_s": f"{tps:,.0f}",
            "mfu": f"{record['mfu']:.0%}",
        }

    def evaluate(self, checkpoint_dir: Path) -> None:
        """Dev loss/PPL, greedy BLEU or F1 (`dev.dev_report`), probe traces for the timeline."""
        if self.cfg.eval_sentences <= 0 and self.cfg.probes <= 0 and not self.cfg.align_gold:
            return
        report = dev_report(self.model, self.cfg.data, checkpoint_dir, self.out, self.step, self.cfg)
        if report:
            self.metrics.write({"step": self.step, **report})
            print(
                f"\nstep {self.step}: " + ", ".join(f"{k} {v:.3f}" for k, v in report.items() if isinstance(v, float)),
                file=self.log,
            )
