"""Named training recipes: everything `attnlab train --recipe NAME` needs besides the data.

Each recipe reproduces a bundled model (or a paper run) with one command once its data is
prepared (the recipe names the `attnlab data prepare` call). Scaling a recipe to a GPU or a
cluster changes only `max_tokens`/`update_freq` and the launcher (`torchrun`), not the maths.
"""

from __future__ import annotations

from typing import Any

from attnlab.errors import ConfigError
from attnlab.model.config import PRESETS

RECIPES: dict[str, dict[str, Any]] = {
    # The bundled translator: 3+3 layers, d_model 256, 4 heads, trained ~1 h on 2 CPU cores.
    # An hour is ~1,500 updates, so warm-up 4000 would never end: warm-up is 500 and Eq. (3) is
    # scaled by 0.4 (peak lr ≈ 1.1e-3 at step 500, 6.7e-4 at step 1,400).
    "multi30k-en-de": {
        "prepare": "attnlab data prepare multi30k --pair en-de --vocab-size 8000 --out prepared/multi30k-en-de",
        "data": "prepared/multi30k-en-de",
        "out": "runs/multi30k-en-de",
        "preset": "small",
        "max_tokens": 6000,
        "warmup": 500,
        "lr_scale": 0.4,
        "dtype": "bf16",
        "max_steps": 2000,  # about an hour at ~1.8 s per update on 2 idle cores (bf16)
        "save_every": 100,
        "keep_last": 8,
        "log_every": 25,
        "eval_sentences": 300,
    },
    # Tatoeba translators, everything else as multi30k-en-de. Budget: both checkpoints together
    # ~26 MB in bf16 (small at 6,000 pieces is 14.1 MB, with d_ff 512 11.0 MB), so es keeps the
    # `small` shape and zh, on a quarter of the data, a narrower feed-forward layer (the same
    # 3 layers x 4 heads, so the same attention grid in the explorer).
    # Times are estimates scaled by FLOPs from multi30k-en-de's ~1.8 s per 6k-token update on 2
    # idle cores (bf16). On a GPU the same recipe runs unchanged in minutes; to fill a large one,
    # raise max_tokens (e.g. 24000) and divide max_steps, warmup and save_every by the same factor,
    # which keeps the number of epochs and the schedule's shape.
    # es-en: 115k training pairs, 208 updates an epoch: 2,000 updates (~1.7 s) ≈ 1 h ≈ 10 epochs.
    "tatoeba-en-es": {
        "prepare": "attnlab data prepare tatoeba --pair en-es --vocab-size 6000 --out prepared/tatoeba-en-es",
        "data": "prepared/tatoeba-en-es",
        "out": "runs/tatoeba-en-es",
        "preset": "small",
        "max_tokens": 6000,
        "warmup": 500,
        "lr_scale": 0.4,
        "dtype": "bf16",
        "max_steps": 2000,
        "save_every": 100,
        "keep_last": 8,
        "log_every": 25,
        "eval_sentences": 300,
        "probes": 4,
    },
    # zh-en: 30k training pairs (simplified script), 54 updates an epoch: 2,500 updates (~1.3 s
    # with d_ff 512) ≈ 55 min ≈ 46 epochs, about twice multi30k's; watch dev BLEU (tok:zh) level off.
    "tatoeba-en-zh": {
        "prepare": "attnlab data prepare tatoeba --pair en-zh --vocab-size 6000 --out prepared/tatoeba-en-zh",
        "data": "prepared/tatoeba-en-zh",
        "out": "runs/tatoeba-en-zh",
        "preset": "small",
        "overrides": {"d_ff": 512},
        "max_tokens": 6000,
        "warmup": 500,
        "lr_scale": 0.4,
        "dtype": "bf16",
        "max_steps": 2500,
        "save_every": 100,
        "keep_last": 8,
        "log_every": 25,
        "eval_sentences": 300,
        "probes": 4,
        "align_gold": "zhen_dev",  # every head's AER on human Zh-En links at each checkpoint (#20)
    },
    # The bundled parser (§6.3 at laptop scale): the WSJ sample, words in, linearised tree out.
    "wsj-parser": {
        "prepare": "attnlab data prepare ptb --vocab-size 4000 --out prepared/wsj",
        "data": "prepared/wsj",
        "out": "runs/wsj-parser",
        "preset": "small",
        "max_tokens": 6000,
        "warmup": 800,
        "lr_scale": 0.5,
        "dtype": "bf16",
        "max_steps": 4800,  # ~75 epochs of the 3,493 spelled training trees; ~1 s per update on 2 cores
        "save_every": 100,
        "keep_last": 5,
        "eval_sentences": 100,
    },
    # The paper's runs (§5.2). §5.1's batch, ~25,000 source + 25,000 target tokens, is one update
    # across the paper's 8 GPUs, and max_tokens is per process and micro-batch: the recipe holds the
    # whole batch for one process; W processes split it (`--max-tokens $((25000 / W))`), a GPU too
    # small for it accumulates (`--max-tokens 6250 --update-freq 4`). `attnlab train` prints the
    # tokens per update at start-up. Checkpoints every 10 minutes (§6.1): 1,500 updates of base at
    # ~0.4 s on the paper's GPUs, 600 of big at ~1.0 s.
    "wmt14-base": {
        "prepare": "attnlab data prepare wmt14 --vocab-size 37000 --train-dir FULL_WMT14_DIR --out prepared/wmt14",
        "data": "prepared/wmt14",
        "out": "runs/wmt14-base",
        "preset": "base",
        "max_tokens": 25000,
        "update_freq": 1,
        "max_steps": 100_000,
        "save_every": 1250,  # ~8 minutes at 0.4 s (1,500, the paper's 10, left 100,000's last 5 unevenly spaced)
        "keep_last": 5,
        "dtype": "bf16",
        "compile": "model",
    },
    "wmt14-big": {
        "prepare": "attnlab data prepare wmt14 --vocab-size 37000 --train-dir FULL_WMT14_DIR --out prepared/wmt14",
        "data": "prepared/wmt14",
        "out": "runs/wmt14-big",
        "preset": "big",
        "max_tokens": 25000,
        "update_freq": 1,
        "max_steps": 300_000,
        "save_every": 600,
        "keep_last": 20,
        "dtype": "bf16",
        "compile": "model",
    },
}


# Table 1's restricted self-attention against global, everything else the bundled translator's
# (docs/EXPERIMENTS.md): the same data, budget, schedule and seed at r = 1, 3, 5 and r = ∞.
RECIPES |= {
    f"multi30k-en-de-{name}": {
        **RECIPES["multi30k-en-de"],
        "out": f"runs/local/{name}",
        "preset": preset,
        "seed": 1,
        "probes": 4,
    }
    for name, preset in (("r1", "small-r1"), ("r3", "small-r3"), ("r5", "small-r5"), ("global", "small"))
}

# EN→FR for the alignment study (docs/EXPERIMENTS.md, "Which head aligns?"): everything as the
# bundled EN→DE translator, plus every head's AER at each checkpoint on the first 100 pairs of the
# human EN-FR links, which are Canadian parliament debates, not image captions: another domain.
RECIPES["multi30k-en-fr"] = {
    **RECIPES["multi30k-en-de"],
    "prepare": "attnlab data prepare multi30k --pair en-fr --vocab-size 8000 --out prepared/multi30k-en-fr",
    "data": "prepared/multi30k-en-fr",
    "out": "runs/multi30k-en-fr",
    "probes": 4,
    "align_gold": "enfr",
}

# §6.1: the base model is the average of its last 5 checkpoints, the big one of its last 20.
PAPER_AVERAGED = {"base": 5, "big": 20}


PAPER_BATCH = 25_000  # §5.1: ~25,000 source and 25,000 target tokens an update


def preset_defaults(name: str, shares: int = 1) -> dict[str, Any]:
    """`max_steps`, `max_tokens` and `keep_last` of a run of preset `name` that sets none of them:
    the paper's where it states them (§5.2: base 100K updates, big 300K; §5.1: ~25,000 tokens a
    side an update, here shared by `shares` = processes × update_freq micro-batches; §6.1:
    averaging 5 or 20 checkpoints), else 100K updates of 4,096 tokens keeping 5. `--preset big`
    alone trained 100K updates and kept 5 checkpoints, a third of its run and a quarter of what it
    averages, and base and big read 4,096 tokens an update, a sixth of the paper's batch; from
    Python (`TrainConfig(preset="big")`) they still did until these became TrainConfig's own."""
    found = {"max_steps": 100_000, "max_tokens": 4096, "keep_last": 5}
    config = PRESETS.get(name)  # an unknown name is reported when the model is built
    if config is None or "ppl_dev" not in config.paper:  # not a row of Table 3 (`small`, `parse`, ...)
        return found
    found["max_steps"] = int(config.paper.get("train_steps", 100_000))  # (a blank in Table 3: base's)
    found["max_tokens"] = -(-PAPER_BATCH // max(1, shares))
    return found | ({"keep_last": PAPER_AVERAGED[name]} if name in PAPER_AVERAGED else {})


def recipe(name: str) -> dict[str, Any]:
    """TrainConfig fields of a recipe (without its `prepare` line)."""
    if name not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; choose one of: {', '.join(RECIPES)}")
    return {k: v for k, v in RECIPES[name].items() if k != "prepare"}
