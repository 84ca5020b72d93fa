"""Training: Eq. (3), a real short run on Multi30k, exact resume after SIGKILL, DDP = update_freq,
checkpoint averaging, and checkpoints that never unpickle."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnlab.app.checkpoints import alignment_snapshots
from attnlab.data.batching import TokenBatchSampler
from attnlab.decode.readings import candidates
from attnlab.errors import CheckpointError, ConfigError, DataError
from attnlab.model.checkpoint import latest_valid, load_model, load_trainer_state, save_checkpoint, step_dirs
from attnlab.model.config import preset
from attnlab.model.manifest import sha256_of
from attnlab.model.transformer import Transformer
from attnlab.train.average import average
from attnlab.train.loop import TrainConfig
from attnlab.train.regime import learning_rate

PY = sys.executable
TINY = ["--preset", "tiny", "--max-tokens", "600", "--log-every", "2", "--eval-sentences", "0", "--probes", "0"]


def test_learning_rate_is_eq3() -> None:
    for step in (1, 4000, 100_000):
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert learning_rate(step, 512, 4000) == pytest.approx(expected, rel=1e-12)
    assert learning_rate(4000, 512) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert learning_rate(4000, 512, scale=2.0) == pytest.approx(2 * learning_rate(4000, 512))


@pytest.fixture(scope="session")
def prepared(data_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prep") / "m30k"
    from attnlab.cli import main

    assert (
        main(["data", "prepare", "multi30k", "--data-dir", str(data_dir), "--vocab-size", "2000", "--out", str(out)])
        == 0
    )
    return out


def _train(
    prepared: Path, out: Path, *args: str, env: dict | None = None, launcher: list[str] | None = None
) -> subprocess.Popen:
    command = [*(launcher or [PY, "-m", "attnlab"]), "train", "--data", str(prepared), "--out", str(out), *TINY, *args]
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def _losses(run: Path) -> list[tuple[int, float]]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in lines if "loss" in r]


def _params(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(step_dirs(run)[-1][1] / "model.safetensors"))


@pytest.mark.slow
def test_short_real_run_learns(prepared: Path, data_dir: Path, tmp_path: Path) -> None:
    run, copied_set = tmp_path / "run", tmp_path / "links"
    for suffix in (".src-tgt", ".gold"):
        shutil.copyfile(data_dir / "alignment" / f"enfr{suffix}", f"{copied_set}{suffix}")
    args = [
        "--max-minutes",  # idle Zen 4: ~270 steps, loss 8.0 -> 4.7 (1.5 down by step 30), dev BLEU > 0
        "0.25",
        "--max-steps",
        "100000",
        "--save-every",
        "100000",
        "--log-every",
        "5",
        "--eval-sentences",
        "100",
        "--probes",
        "2",
        "--lr-scale",
        "2",
        "--warmup",
        "200",
        "--max-tokens",
        "1500",
        "--align-gold",  # the mechanism only: an EN-DE model read on a copy of the EN-FR gold, a
        str(copied_set),  # STEM of unknown languages (`enfr`, or its own path, is refused for EN-DE)
        "--align-pairs",
        "5",
    ]
    command = [PY, "-m", "attnlab", "train", "--data", str(prepared), "--out", str(run), "--preset", "tiny", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch.compile: loss (auto on cpu)" in done.stderr  # the default, with its one line
    losses = [loss for _, loss in _losses(run)]
    assert losses[-1] < losses[0] - 1.5, losses
    dev = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "dev_bleu" in line]
    assert dev and dev[-1]["dev_bleu"] > 0 and dev[-1]["dev_ppl"] < 1000  # uniform over the 2,000 pieces would be 2,000
    assert len(list((run / "probes").glob("step_*/probe_*.trace"))) == 2
    tables = alignment_snapshots(run)  # what the explorer's timeline reads
    assert list(tables) == [dev[-1]["step"]] and tables[dev[-1]["step"]]["pairs"] == 5
    rows = tables[dev[-1]["step"]]["rows"]
    tiny = preset("tiny")
    assert len(rows) == len(candidates(tiny.n_layers, tiny.n_heads))
    assert [r["aer"] for r in rows] == sorted(r["aer"] for r in rows) and dev[-1]["dev_aer"] == rows[0]["aer"]
    # every head's importance on the dev pairs at the checkpoint, as the model saved there gives it
    from attnlab.app.checkpoints import importance_snapshots
    from attnlab.data.prepared import ParallelData
    from attnlab.decode.loading import load
    from attnlab.record.importance import pair_importance

    weighed = importance_snapshots(run)
    step = dev[-1]["step"]
    assert list(weighed) == [step] and weighed[step].shape == (3, tiny.n_layers, tiny.n_heads)
    saved = load(run / "checkpoints" / f"step_{step}")
    data, eos = ParallelData(prepared, "valid"), saved.config.eos_id
    pairs = [([*map(int, data.src(i)), eos], [*map(int, data.tgt(i)), eos]) for i in range(100)]
    np.testing.assert_allclose(weighed[step], pair_importance(saved.model, pairs).gradient, rtol=1e-3, atol=1e-5)
    assert dev[-1]["dev_importance"] == pytest.approx(weighed[step].max())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_sigkill_and_resume_is_bit_exact(prepared: Path, tmp_path: Path, dtype: str) -> None:
    """In fp32, and in bf16 (autocast, with the fp32 weights the checkpoint holds); with attention
    dropout too (`p_attn_drop`, drawn by PyTorch's kernels from the generator the checkpoint saves)."""
    common = ["--max-steps", "16", "--save-every", "4", "--keep-last", "0", "--dtype", dtype, "p_attn_drop=0.2"]
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    uninterrupted = _train(prepared, straight, *common)  # beside the killed run: one thread each, two cores
    proc = _train(prepared, killed, *common)
    deadline = time.time() + 240
    while time.time() < deadline and not (killed / "checkpoints" / "step_8").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoints" / "step_8").exists()
    assert not (killed / "checkpoints" / "step_16").exists(), "the run finished before it could be killed"
    _finish(uninterrupted)
    err = _finish(_train(prepared, killed, *common))
    assert "resumed from" in err
    a, b = _params(straight), _params(killed)
    assert json.loads((killed / "checkpoints" / "step_16" / "config.json").read_text())["model"]["p_attn_drop"] == 0.2
    assert all(t.dtype == torch.float32 for t in a.values())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _losses(straight) == _losses(killed)
    # the log's training time counts on from the checkpoint's (it restarted at 0 on resume)
    lines = [json.loads(line) for line in (killed / "metrics.jsonl").read_text().splitlines()]
    wall = [r["wall_s"] for r in lines if "wall_s" in r]
    assert len(wall) == 8 and wall == sorted(wall), wall


def test_truncated_checkpoint_is_skipped(tmp_path: Path) -> None:
    model = Transformer(preset("tiny"))
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    for step in (1, 2):
        save_checkpoint(
            tmp_path / "run" / "checkpoints" / f"step_{step}",
            model,
            spm,
            {"rng.cpu": torch.get_rng_state()},
            {"step": step},
        )
    weights = tmp_path / "run" / "checkpoints" / "step_2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.warns(UserWarning) as said:
        assert latest_valid(tmp_path / "run").name == "step_1"
    skipped, read = (str(w.message) for w in said)  # the damaged one, then the one read instead
    assert skipped.startswith("skipping damaged checkpoint: ") and "step_2" in skipped
    assert read == f"reading step_1, the newest checkpoint of {tmp_path / 'run'} that verifies"
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(tmp_path / "run" / "checkpoints" / "step_2")
    # another tokenizer in its place is not "missing or truncated" (what it said of any other size)
    (tmp_path / "run" / "checkpoints" / "step_1" / "spm.model").write_bytes(b"another tokenizer")
    with pytest.raises(CheckpointError, match="spm.model is not the file this checkpoint was written with"):
        load_model(tmp_path / "run" / "checkpoints" / "step_1")
    # On the command line the warning is a line for the user, not Python's file:line and source
    done = subprocess.run(
        [PY, "-m", "attnlab", "average", str(tmp_path / "run"), "--last", "5", "--out", str(tmp_path / "avg")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "UserWarning" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[0].startswith("attnlab average: warning: ")


def test_pickle_payload_is_refused(tmp_path: Path) -> None:
    model = Transformer(preset("tiny"))
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    path = save_checkpoint(tmp_path / "ck", model, spm, {"rng.cpu": torch.get_rng_state()}, {"step": 1})
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (path / "trainer.safetensors").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError, match="refusing"):
        load_trainer_state(path)
    (path / "model.safetensors").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError):
        load_model(path, deep=False)
    assert not marker.exists()


def test_a_checkpoint_file_grown_past_its_header_is_refused_before_it_is_hashed(tmp_path: Path) -> None:
    """A model.safetensors grown into a sparse file of gigabytes (`truncate -s`, a few bytes on
    disk) and listed at that size in a rewritten manifest was hashed whole before the digest
    refused it: seconds a gigabyte, hours for terabytes, and the explorer's model lock held all
    the while. Its safetensors header accounts for the bytes it has, which is read first. A file
    name with a control character in it is refused too, and named with it escaped."""
    model = Transformer(preset("tiny"))
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    path = save_checkpoint(tmp_path / "ck", model, spm, {"rng.cpu": torch.get_rng_state()}, {"step": 1})
    weights, manifest = path / "model.safetensors", json.loads((path / "manifest.json").read_text())
    written = weights.stat().st_size
    os.truncate(weights, 8 * 2**30)
    manifest["files"]["model.safetensors"]["bytes"] = 8 * 2**30
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError, match=f"model.safetensors has 8,589,934,592 bytes where its header accounts for {written:,}"
    ):
        load_model(path)
    manifest["files"]["a\x00b"] = manifest["files"].pop("model.safetensors")
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=re.escape("lists 'a\\x00b', not a file of the checkpoint")):
        load_model(path)


def test_average_is_elementwise_mean(tmp_path: Path) -> None:
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    a, b = Transformer(preset("tiny")), Transformer(preset("tiny"))
    dirs = [save_checkpoint(tmp_path / name, m, spm) for name, m in (("a", a), ("b", b))]
    mean = average(dirs)
    for name, tensor in a.state_dict().items():
        assert torch.allclose(mean[name], (tensor + b.state_dict()[name]) / 2)


def test_only_a_training_checkpoint_replaces_a_training_checkpoint(tmp_path: Path) -> None:
    """`attnlab average RUN_A --out RUN_B/checkpoints/step_12` took RUN_B's optimizer state: RUN_B
    then failed to resume ("trainer.safetensors: not a safetensors file")."""
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    model = Transformer(preset("tiny"))
    state = ({"adam": torch.zeros(2)}, {"step": 12})
    step = save_checkpoint(tmp_path / "run" / "checkpoints" / "step_12", model, spm, *state)
    with pytest.raises(CheckpointError, match="step_12 is a training run's checkpoint .*refusing to replace it"):
        save_checkpoint(step, model, spm)  # what `average`, `import` and `export` write
    assert load_trainer_state(step)[1]["step"] == 12  # untouched
    save_checkpoint(step, model, spm, *state)  # the run itself saves again over its own step
    plain = save_checkpoint(tmp_path / "averaged", model, spm)
    save_checkpoint(plain, model, spm)  # an average replaces an older average, as before


def test_a_checkpoint_is_not_replaced_over_a_model_card_nor_written_under_a_file(tmp_path: Path) -> None:
    """`attnlab average RUN --out checkpoints/multi30k-en-de --force` deleted the bundled model's
    card (its probes, which `average` writes too, may go); a parent that is a file said "(File
    exists)"; a link to nothing was "does not exist"."""
    from attnlab.model.manifest import check_directory

    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    model = Transformer(preset("tiny"))
    bundled = save_checkpoint(tmp_path / "bundled", model, spm)
    (bundled / "probes" / "step_1").mkdir(parents=True)
    save_checkpoint(bundled, model, spm)  # an average with its probes replaced by a new one, as before
    (bundled / "README.md").write_text("a model card")
    with pytest.raises(
        CheckpointError, match=r"bundled holds 'README.md', which its manifest does not list .*refusing"
    ):
        save_checkpoint(bundled, model, spm)
    assert (bundled / "README.md").read_text() == "a model card"
    with pytest.raises(CheckpointError, match=rf"cannot write .* \({re.escape(str(spm))} is not a directory\)$"):
        save_checkpoint(spm / "x", model, spm)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(CheckpointError, match="loop: a symbolic link to nothing"):
        check_directory(tmp_path / "loop")


def test_average_refuses_checkpoints_of_different_models(tmp_path: Path) -> None:
    """Equal shapes, other models: the mean of a global and a restricted model (or of two
    vocabularies of as many pieces) once came out as a checkpoint with the last one's config."""
    spm, other_spm = tmp_path / "spm.model", tmp_path / "other.model"
    spm.write_bytes(b"x")
    other_spm.write_bytes(b"y")
    base = save_checkpoint(tmp_path / "base", Transformer(preset("tiny")), spm)
    cases = {
        "window": (Transformer(preset("tiny", attn_window=3)), spm, "configs differ"),
        "vocab": (Transformer(preset("tiny")), other_spm, "different vocabularies"),
        "layers": (Transformer(preset("tiny", n_layers=3)), spm, "configs differ"),
    }
    for name, (model, tokenizer, match) in cases.items():
        other = save_checkpoint(tmp_path / name, model, tokenizer)
        for pair in ([base, other], [other, base]):
            with pytest.raises(CheckpointError, match=match):
                average(pair)
    # a checkpoint listed and then pruned by a run still saving is no damaged checkpoint
    with pytest.raises(CheckpointError, match="pruned-away was removed while averaging; is the run still saving"):
        average([base, tmp_path / "pruned-away"])


def _updates(sampler: TokenBatchSampler, update_freq: int, n: int) -> list[list[tuple[int, ...]]]:
    """The micro-batches of the sampler's first `n` updates, read epoch after epoch as the trainer does."""

    def stream() -> Iterator[tuple[int, ...]]:
        while True:
            yield from (tuple(batch.tolist()) for batch in sampler)
            sampler.set_epoch(sampler.epoch + 1)

    batches = stream()
    return [[next(batches) for _ in range(update_freq)] for _ in range(n)]


@pytest.mark.parametrize(("world", "update_freq"), [(2, 1), (2, 2), (3, 2), (4, 1)])
def test_ranks_read_the_micro_batches_one_process_reads(world: int, update_freq: int) -> None:
    """Rank r's micro-batch i of update k is micro-batch i·W + r of the same update of one
    process with update_freq W·F, for three epochs (whose batch counts are odd before evening)."""
    rng = np.random.default_rng(0)
    src = rng.integers(1, 80, 1003)
    tgt = np.clip(src + rng.integers(-10, 10, 1003), 1, None)
    group = world * update_freq
    single = TokenBatchSampler(src, tgt, 500, seed=3, update_freq=group)
    assert len(TokenBatchSampler(src, tgt, 500, seed=3)) == 97  # odd: every group needs evening
    n = 3 * len(single) // group
    one = _updates(single, group, n)
    ranks = [
        _updates(
            TokenBatchSampler(src, tgt, 500, seed=3, rank=r, world_size=world, update_freq=update_freq), update_freq, n
        )
        for r in range(world)
    ]
    for k in range(n):
        for r in range(world):
            for i in range(update_freq):
                assert ranks[r][k][i] == one[k][i * world + r], (k, r, i)


def _shaped(src: np.ndarray, tgt: np.ndarray, world: int, freq: int) -> list[TokenBatchSampler]:
    return [TokenBatchSampler(src, tgt, 500, seed=3, rank=r, world_size=world, update_freq=freq) for r in range(world)]


def _global_updates(samplers: list[TokenBatchSampler], freq: int, n: int) -> list[list[tuple[int, ...]]]:
    """The next `n` updates' micro-batches in the order one process reads them (i·W + r)."""
    ranks = [_updates(sampler, freq, n) for sampler in samplers]
    return [[ranks[j % len(ranks)][k][j // len(ranks)] for j in range(len(ranks) * freq)] for k in range(n)]


@pytest.mark.parametrize(("before", "after"), [((2, 1), (1, 2)), ((1, 4), (2, 2)), ((4, 1), (2, 2)), ((2, 2), (4, 1))])
def test_a_run_resumes_on_other_ranks_at_the_same_batch(before: tuple[int, int], after: tuple[int, int]) -> None:
    """W ranks × F saved mid-epoch, resumed as W' × F' with W'·F' = W·F: the updates that follow
    are the ones the first shape would have read (8 GPUs continue on 4 with --update-freq 2);
    another product is one line naming the product to resume with."""
    rng = np.random.default_rng(0)
    src = rng.integers(1, 80, 1003)
    tgt = np.clip(src + rng.integers(-10, 10, 1003), 1, None)
    first = _shaped(src, tgt, *before)
    _global_updates(first, before[1], 7)
    state = first[0].state_dict()
    expected = _global_updates(first, before[1], 40)  # into the next epoch
    moved = _shaped(src, tgt, *after)
    for sampler in moved:
        sampler.load_state_dict(state)
    assert _global_updates(moved, after[1], 40) == expected
    said = r"^cannot resume batches: .* resume with processes × --update-freq = 2 \(here: --update-freq 2\)$"
    with pytest.raises(DataError, match=said):
        TokenBatchSampler(src, tgt, 500, seed=3, update_freq=3).load_state_dict(_shaped(src, tgt, 2, 1)[0].state_dict())
    with pytest.raises(DataError, match=r"= 2$"):  # 3 processes cannot make 2: no --update-freq to name
        _shaped(src, tgt, 3, 1)[0].load_state_dict(_shaped(src, tgt, 2, 1)[0].state_dict())


# One process whose global batch list is rotated by one: every update pairs batches 2k+1 and 2k+2
# instead of 2k and 2k+1. Same data, same init, same normaliser; only the grouping differs, which
# is what the DDP sharding got wrong before (it split batches by world size, so both differed).
ROTATED_BATCHES = (
    "import sys\n"
    "from attnlab.data.batching import TokenBatchSampler\n"
    "make = TokenBatchSampler._make_batches\n"
    "TokenBatchSampler._make_batches = lambda self, epoch: (lambda b: b[1:] + b[:1])(make(self, epoch))\n"
    "from attnlab.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
DDP_ATOL = 1e-5


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _checkpoints(run: Path) -> dict[int, dict[str, torch.Tensor]]:
    return {step: load_file(str(path / "model.safetensors")) for step, path in step_dirs(run)}


def _ddp(port: int) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}", "-m", "attnlab"]


@pytest.mark.slow
def test_ddp_two_ranks_equal_update_freq_two(prepared: Path, tmp_path: Path) -> None:
    """2 ranks = 1 process with --update-freq 2, at a learning rate where it could fail.

    warmup 10 makes the updates large: the five between step 5 and step 10 move every weight
    tensor by more than 100 × the tolerance. Dropout is off, so that only the batches, their
    grouping and the normaliser matter. The rotated twin (same batches, grouped one batch later)
    proves that the comparison fails when the grouping is broken.
    """
    common = ["--max-steps", "10", "--save-every", "5", "--keep-last", "0", "--warmup", "10", "p_drop=0.0"]
    runs = {
        "single": _train(prepared, tmp_path / "single", *common, "--update-freq", "2"),
        "ddp": _train(prepared, tmp_path / "ddp", *common, launcher=_ddp(29517)),
        "rotated": _train(
            prepared, tmp_path / "rotated", *common, "--update-freq", "2", launcher=[PY, "-c", ROTATED_BATCHES]
        ),
    }
    for proc in runs.values():
        _finish(proc)
    single, ddp, rotated = (_checkpoints(tmp_path / name) for name in runs)
    assert single.keys() == ddp.keys() == rotated.keys() == {5, 10}
    moved = [float((single[10][k] - single[5][k]).abs().max()) for k in single[10]]
    assert min(moved) > 100 * DDP_ATOL and max(moved) > 1000 * DDP_ATOL
    for step in (5, 10):
        assert _max_diff(single[step], ddp[step]) <= DDP_ATOL, step
    assert _losses(tmp_path / "single") == _losses(tmp_path / "ddp")  # the log sums all ranks' tokens
    assert _max_diff(single[10], rotated[10]) > 100 * DDP_ATOL  # the broken twin

    # Either run resumes in the other's shape (2 ranks × 1 = 1 process × 2) at the same batch.
    for run, moved, launcher, freq in (("ddp", "to_one", None, "2"), ("single", "to_two", _ddp(29520), "1")):
        shutil.copytree(tmp_path / run, tmp_path / moved)
        shutil.rmtree(dict(step_dirs(tmp_path / moved))[10])
        _finish(_train(prepared, tmp_path / moved, *common, "--update-freq", freq, launcher=launcher))
        assert _max_diff(single[10], _checkpoints(tmp_path / moved)[10]) <= DDP_ATOL, moved
    other = _train(prepared, tmp_path / "to_one", *common, "--max-steps", "15", "--update-freq", "1")
    _, err = other.communicate(timeout=300)
    assert other.returncode != 0 and err.strip().splitlines()[-1].endswith(
        "resume with processes × --update-freq = 2 (here: --update-freq 2)"
    ), err[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(("dtype", "port"), [("fp32", 29518), ("bf16", 29519)])
def test_ddp_two_ranks_draw_the_dropout_masks_of_update_freq_two(
    prepared: Path, tmp_path: Path, dtype: str, port: int
) -> None:
    """With dropout on, each micro-batch gets the masks one process with --update-freq 2 draws
    for it (micro_seed), so the runs still agree; one seed per process would not. In fp32 and
    in bf16 (autocast)."""
    common = ["--max-steps", "6", "--save-every", "6", "--warmup", "10", "p_drop=0.1", "--dtype", dtype]
    single = _train(prepared, tmp_path / "single", *common, "--update-freq", "2")
    ddp = _train(prepared, tmp_path / "ddp", *common, launcher=_ddp(port))
    _finish(single)
    _finish(ddp)
    assert _max_diff(_params(tmp_path / "single"), _params(tmp_path / "ddp")) <= DDP_ATOL
    assert _losses(tmp_path / "single") == _losses(tmp_path / "ddp")


def _rank_pid(launcher: int, rank: int) -> int | None:
    """The pid of one rank among a torchrun launcher's children (read off their environment)."""
    children = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    for pid in children:
        with contextlib.suppress(OSError):
            if f"RANK={rank}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return int(pid)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_a_rank_that_dies_is_one_line_on_the_others(prepared: Path, tmp_path: Path, victim: int) -> None:
    """Rank 1 killed: rank 0 printed gloo's RuntimeError as a traceback through the backward
    pass; it now says it lost a rank, which checkpoint is the last, and how to go on. Rank 0
    killed while it evaluates the checkpoint it has just published (rank 1 waits at the barrier):
    rank 1 named the checkpoint before it."""
    port = 29521 + victim
    # rank 0 evaluates each checkpoint after publishing it, while rank 1 waits at the barrier
    run = ("--max-steps", "400", "--save-every", "4", "--eval-sentences", "20")
    ddp = _train(prepared, tmp_path / "ddp", *run, launcher=_ddp(port))
    deadline = time.time() + 240
    while time.time() < deadline and not (tmp_path / "ddp" / "checkpoints" / "step_8").exists():
        time.sleep(0.01)
    pid = _rank_pid(ddp.pid, victim)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _, err = ddp.communicate(timeout=120)
    saved = max(step for step, _ in step_dirs(tmp_path / "ddp"))
    survivor = 1 - victim
    assert f"[rank{survivor}]: Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("attnlab train: error:")]
    assert len(lines) == 1 and f"rank {survivor} lost another rank of the run (" in lines[0], err[-2000:]
    assert lines[0].endswith(f"the last checkpoint is step_{saved}; run the same command to resume"), lines


def test_average_run_ships_probe_snapshots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from attnlab.train.average import average_run

    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    run = tmp_path / "run"
    for step in (10, 20, 30):
        save_checkpoint(run / "checkpoints" / f"step_{step}", Transformer(preset("tiny")), spm)
        (run / "probes" / f"step_{step}").mkdir(parents=True)
        (run / "probes" / f"step_{step}" / "probe_0.trace").write_bytes(b"t")
        table = {"set": "enfr", "pairs": 1, "rows": [{"reading": "all", "aer": step / 100}]}
        (run / "probes" / f"step_{step}" / "alignment.json").write_text(json.dumps(table))
    out = average_run(run, 2, tmp_path / "avg", torch.bfloat16, snapshots=2)
    from attnlab.cli import main  # --probes -1 copied none without a word

    assert main(["average", str(run), "--last", "2", "--out", str(tmp_path / "none"), "--probes", "-1"]) == 2
    capsys.readouterr()
    for where, said in ((tmp_path / "nope", "no such directory"), (tmp_path, "no checkpoints/step_N directories")):
        assert main(["average", str(where), "--out", str(tmp_path / "none")]) == 2  # (a typo: "no checkpoints")
        assert capsys.readouterr().err.strip() == f"attnlab average: error: {where}: {said}"
    assert sorted(p.parent.name for p in (out / "probes").glob("step_*/probe_0.trace")) == ["step_10", "step_30"]
    assert {s: t["rows"][0]["aer"] for s, t in alignment_snapshots(out).items()} == {10: 0.1, 20: 0.2, 30: 0.3}
    model, meta = load_model(out)
    assert meta["averaged"] == ["step_20", "step_30"]
    assert (out / "model.safetensors").stat().st_size < (
        run / "checkpoints" / "step_30" / "model.safetensors"
    ).stat().st_size
    # a stopped run's own save (step 33) among them: said, since §6.1's are evenly spaced
    save_checkpoint(run / "checkpoints" / "step_33", Transformer(preset("tiny")), spm)
    with pytest.warns(UserWarning, match=r"unevenly spaced \(steps 20, 30, 33\); §6\.1 averages"):
        average_run(run, 3, tmp_path / "uneven")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        average_run(run, 2, tmp_path / "even")  # (two are always evenly spaced)
    # without --last, what the run kept (`--keep-last`: the paper's 20 for big), not always 5
    kept = tmp_path / "kept"
    for step in (10, 20, 30):
        settings = {"train_config": {"keep_last": 2}, "step": step}
        save_checkpoint(kept / "checkpoints" / f"step_{step}", Transformer(preset("tiny")), spm, {}, settings)
    assert main(["average", str(kept), "--out", str(tmp_path / "kept-avg")]) == 0
    assert load_model(tmp_path / "kept-avg")[1]["averaged"] == ["step_20", "step_30"]


def test_a_checkpoint_never_replaces_what_is_not_a_checkpoint(tmp_path: Path) -> None:
    """`attnlab average RUN --last 1 --out RUN` once deleted the run it averaged (checkpoints,
    log): a new checkpoint replaced whatever directory it was told to write to."""
    from attnlab.train.average import average_run

    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    run = tmp_path / "run"
    for step in (1, 2):
        save_checkpoint(run / "checkpoints" / f"step_{step}", Transformer(preset("tiny")), spm)
    (run / "metrics.jsonl").write_text('{"step": 2}\n')
    before = sorted(str(p.relative_to(tmp_path)) for p in run.rglob("*"))
    for out, force, match in (
        (run, True, "is the run .* itself"),
        (run / "checkpoints" / "step_1", True, "inside the run"),
        (tmp_path, False, "already exists; choose another --out or pass --force"),  # the run's parent
        (tmp_path, True, "not an attnlab checkpoint"),
    ):
        with pytest.raises(CheckpointError, match=match):
            average_run(run, 1, out, force=force)
    for last in (0, -1):  # -1 was an IndexError, 0 averaged every checkpoint
        with pytest.raises(ConfigError, match="--last must be"):
            average_run(run, last, tmp_path / "avg")
    assert sorted(str(p.relative_to(tmp_path)) for p in run.rglob("*")) == before
    papers = tmp_path / "papers"
    papers.mkdir()
    (papers / "thesis.tex").write_text("years of work")
    with pytest.raises(CheckpointError, match="not an attnlab checkpoint"):
        save_checkpoint(papers, Transformer(preset("tiny")), spm)
    assert (papers / "thesis.tex").read_text() == "years of work"
    with pytest.raises(CheckpointError, match="cannot write") as error:  # was a FileExistsError traceback
        save_checkpoint(papers / "thesis.tex" / "avg", Transformer(preset("tiny")), spm)
    assert "\n" not in str(error.value) and (papers / "thesis.tex").read_text() == "years of work"
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "empty"):  # an empty directory, then an older checkpoint
        assert (save_checkpoint(out, Transformer(preset("tiny")), spm) / "manifest.json").is_file()


def test_average_replaces_a_checkpoint_only_with_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`attnlab average RUN --out checkpoints/multi30k-en-de` replaced the bundled model, its card
    and probes, without a word (`import` and `export` asked for --force; --force still keeps off a
    model card); an --out that is a file was refused only after the averaging."""
    from attnlab.cli import main

    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    run, shipped = tmp_path / "run", tmp_path / "shipped"
    for step in (1, 2):
        save_checkpoint(run / "checkpoints" / f"step_{step}", Transformer(preset("tiny")), spm)
    save_checkpoint(shipped, Transformer(preset("tiny", n_layers=1)), spm)
    (shipped / "README.md").write_text("the model card")
    (tmp_path / "notes.txt").write_text("notes")
    for out in (shipped, tmp_path / "notes.txt"):
        assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 2
        error = capsys.readouterr().err.strip()
        assert (
            error == f"attnlab average: error: {out} already exists; choose another --out or pass --force to replace it"
        )
    assert (shipped / "README.md").read_text() == "the model card" and load_model(shipped)[0].config.n_layers == 1
    assert main(["average", str(run), "--last", "2", "--out", str(shipped), "--force"]) == 2  # not over its card
    assert "holds 'README.md', which its manifest does not list (a model card added since?)" in capsys.readouterr().err
    (shipped / "README.md").unlink()
    assert main(["average", str(run), "--last", "2", "--out", str(shipped), "--force"]) == 0
    assert load_model(shipped)[1]["averaged"] == ["step_1", "step_2"]


def test_every_recipe_is_a_valid_run_config() -> None:
    from attnlab.model.config import PRESETS
    from attnlab.train.commands import config_from_args
    from attnlab.train.recipes import RECIPES

    assert {"multi30k-en-de-r1", "multi30k-en-de-r3", "multi30k-en-de-r5", "multi30k-en-de-global"} <= set(RECIPES)
    for name in RECIPES:
        config = config_from_args(["--recipe", name])
        assert config.preset in PRESETS and config.max_steps > 0 and config.data and config.out
    local = {name: config_from_args(["--recipe", f"multi30k-en-de-{name}"]) for name in ("r1", "global")}
    assert PRESETS[local["r1"].preset].attn_window == 1 and PRESETS[local["global"].preset].attn_window is None
    assert {k: v for k, v in vars(local["r1"]).items() if k not in ("preset", "out")} == {
        k: v for k, v in vars(local["global"]).items() if k not in ("preset", "out")
    }  # the same budget, schedule and seed


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"lr_scale": -1.0}, "lr_scale must be > 0"),  # trained by gradient ascent without a word
        ({"lr_scale": float("nan")}, "lr_scale must be a finite number"),
        ({"clip_norm": -1.0}, "clip_norm must be ≥ 0"),  # flipped every gradient
        ({"warmup": 0}, "warmup must be"),  # ZeroDivisionError in Eq. (3)
        ({"save_every": 0}, "save_every must be"),  # ZeroDivisionError at the first step
        ({"log_every": 0}, "log_every must be"),
        ({"max_minutes": -1.0}, "max_minutes must be ≥ 0"),
        ({"seed": -5}, "seed must be"),
        ({"seed": 2**64}, "seed must be a whole number ≥ 0 and ≤ 18,446,744,073,709,551,615"),  # torch's 64 bits
        ({"max_tokens": 2**31}, "max_tokens must be a whole number ≥ 1 and ≤ 2,147,483,647"),
        ({"max_steps": 0}, "max_steps must be"),
    ],
)
def test_training_settings_that_crash_later_or_train_something_else_are_refused(
    tmp_path: Path, setting: dict, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as error:
        TrainConfig(data=str(tmp_path), out=str(tmp_path / "run"), **setting)
    assert "\n" not in str(error.value)
    assert TrainConfig(data=str(tmp_path), out=str(tmp_path / "run"), keep_last=0, clip_norm=0.0, max_minutes=0.0)


def test_a_run_resumes_only_on_the_vocabulary_it_was_trained_with(
    prepared: Path, data_dir: Path, tmp_path: Path
) -> None:
    """Multi30k EN-FR prepared with as many pieces fits the EN-DE run's config and batch state
    (29,000 pairs each): without the check the run would go on with every id meaning another piece."""
    from attnlab.cli import main
    from attnlab.train.loop import Trainer

    other = tmp_path / "enfr"
    assert (
        main(
            ["data", "prepare", "multi30k", "--pair", "en-fr", "--data-dir", str(data_dir)]
            + ["--vocab-size", "2000", "--out", str(other)]
        )
        == 0
    )
    settings = {"out": str(tmp_path / "run"), "preset": "tiny", "eval_sentences": 0, "probes": 0, "compile": "off"}
    saved = Trainer(TrainConfig(data=str(prepared), **settings)).save()
    with pytest.raises(CheckpointError, match="another vocabulary") as error:
        Trainer(TrainConfig(data=str(other), **settings))
    assert "\n" not in str(error.value)
    assert Trainer(TrainConfig(data=str(prepared), **settings)).resumed_from == str(saved)


def test_out_alone_resumes_a_run_with_the_settings_it_was_saved_with(prepared: Path, tmp_path: Path, capsys) -> None:
    """A flag left out on resuming went back to its default (a run of --warmup 2 went on at 4000,
    said in one line) and --data had to be given again; a flag given still wins, and says so."""
    from attnlab.train.commands import cli

    run = tmp_path / "run"
    first = ["--data", str(prepared), "--out", str(run), "--preset", "tiny", "--compile", "off", "--probes", "0"]
    first += ["--eval-sentences", "0", "--max-tokens", "600", "--warmup", "2", "--lr-scale", "3", "--max-steps", "2"]
    assert cli(first) == 0
    capsys.readouterr()
    assert cli(["--out", str(run), "--max-steps", "3"]) == 0
    err = capsys.readouterr().err
    assert "resumed from" in err and "resuming with" not in err, err
    info = json.loads((run / "checkpoints" / "step_3" / "trainer.json").read_text())["train_config"]
    assert (info["warmup"], info["lr_scale"], info["data"], info["max_tokens"]) == (2, 3.0, str(prepared), 600)
    assert cli(["--out", str(run), "--max-steps", "4", "--warmup", "5"]) == 0
    assert "resuming with warmup=5 (the run had 2)" in capsys.readouterr().err
    # a notebook's: TrainConfig(data=..., out=RUN) started from the defaults (max_tokens 4096 refused,
    # warmup 4000 taken); `resumed` reads the run's, as --out alone does
    from attnlab.train import Trainer, resumed

    log = io.StringIO()
    assert Trainer(resumed(run, max_steps=5, log_every=2), log=log).run() == run / "checkpoints" / "step_5"
    assert "resuming with" not in log.getvalue() and "resumed from" in log.getvalue()
    info = json.loads((run / "checkpoints" / "step_5" / "trainer.json").read_text())["train_config"]
    assert (info["warmup"], info["max_tokens"], info["log_every"]) == (5, 600, 2)
    losses = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert losses[-1] == 5  # the last steps' loss, not a multiple of log_every, is logged too (it was lost)
    log = io.StringIO()
    assert Trainer(resumed(run, max_steps=3), log=log).run() is None
    assert log.getvalue().endswith("\nattnlab train: at step 5 of max_steps 3: nothing to do\n")
    for bad, said in (({"max_step": 9}, "max_step: not a setting of a run"), ({}, "no checkpoint with the settings")):
        with pytest.raises(ConfigError, match=said):
            resumed(run if bad else tmp_path / "none", **bad)


def test_a_run_begun_with_a_relative_data_path_resumes_from_another_directory(
    prepared: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """`--data prep/m30k` was saved as typed: `--out RUN` alone from any other directory said
    "prep/m30k is not a prepared data directory". It is saved absolute; a run saved with a
    relative one (before 2026-12) asks for --data in one line, not a complaint about the data."""
    from attnlab.errors import DataError
    from attnlab.train.commands import cli

    monkeypatch.chdir(prepared.parent)
    run = tmp_path / "run"
    first = ["--data", prepared.name, "--out", str(run), "--preset", "tiny", "--compile", "off", "--probes", "0"]
    assert cli(first + ["--eval-sentences", "0", "--max-tokens", "600", "--warmup", "2", "--max-steps", "1"]) == 0
    monkeypatch.chdir(tmp_path)
    assert cli(["--out", str(run), "--max-steps", "2"]) == 0
    trainer = run / "checkpoints" / "step_2" / "trainer.json"
    info = json.loads(trainer.read_text())
    assert info["train_config"]["data"] == str(prepared) and "resumed from" in capsys.readouterr().err
    info["train_config"]["data"] = prepared.name  # as runs saved it before (its manifest to match)
    trainer.write_text(json.dumps(info))
    manifest = json.loads((trainer.parent / "manifest.json").read_text())
    manifest["files"]["trainer.json"] = {"bytes": trainer.stat().st_size, "sha256": sha256_of(trainer)}
    (trainer.parent / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"^the run's data, {prepared.name}, was named from the directory it began in"):
        cli(["--out", str(run), "--max-steps", "3"])
    assert cli(["--out", str(run), "--max-steps", "3", "--data", str(prepared)]) == 0


def test_resuming_with_another_update_rule_says_so(prepared: Path, tmp_path: Path, capsys) -> None:
    """A bf16 run resumed without --dtype bf16 goes on in fp32: allowed, but said in one line."""
    from attnlab.train.loop import Trainer

    settings = {"data": str(prepared), "out": str(tmp_path / "run"), "preset": "tiny", "compile": "off"}
    settings |= {"eval_sentences": 0, "probes": 0}
    Trainer(TrainConfig(**settings, dtype="bf16", warmup=500)).save()
    capsys.readouterr()
    Trainer(TrainConfig(**settings, dtype="bf16", warmup=500))
    assert "resuming with" not in capsys.readouterr().err
    Trainer(TrainConfig(**settings, warmup=800))
    notes = [line for line in capsys.readouterr().err.splitlines() if "resuming with" in line]
    assert notes == [
        "attnlab train: resuming with warmup=800 (the run had 500), precision=fp32 (the run had bf16): "
        "the run's trajectory changes here"
    ]


def test_saving_and_evaluating_are_not_counted_in_training_speed(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interval after a checkpoint counted the save and the dev set's beam search as training
    time: its tokens/s and MFU read 7 where the others read 117-773."""
    import time

    from attnlab.train.loop import Trainer

    saving = Trainer.checkpoint

    def slow_checkpoint(self: Trainer) -> Path | None:
        time.sleep(1.5)  # a dev BLEU's beam search
        return saving(self)

    monkeypatch.setattr(Trainer, "checkpoint", slow_checkpoint)
    settings = {"data": str(prepared), "out": str(tmp_path / "run"), "preset": "tiny", "compile": "off"}
    settings |= {"eval_sentences": 0, "probes": 0, "max_tokens": 600, "max_steps": 4, "save_every": 2, "log_every": 1}
    Trainer(TrainConfig(**settings)).run()
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    speed = {line["step"]: line["tokens_per_s"] for line in lines if "tokens_per_s" in line}
    assert speed[3] > 0.3 * speed[4], speed  # (step 3's interval began with the save after step 2)


@pytest.mark.parametrize("products", [True, False])
def test_bf16_training_on_a_cpu_without_bf16_products_says_so(
    products: bool, prepared: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recipes train in bf16; on an AVX2-only CPU PyTorch emulates its products and a step
    takes ~30x as long as in fp32 (`attnlab.model.cpu.bf16_products`): one line says so, once."""
    from attnlab.train import startup
    from attnlab.train.loop import Trainer

    monkeypatch.setattr(startup, "bf16_products", lambda: products)
    settings = {"data": str(prepared), "preset": "tiny", "compile": "off", "eval_sentences": 0, "probes": 0}
    Trainer(TrainConfig(**settings, out=str(tmp_path / "bf16"), dtype="bf16"))
    Trainer(TrainConfig(**settings, out=str(tmp_path / "fp32"), dtype="fp32"))
    warned = [line for line in capsys.readouterr().err.splitlines() if "no bf16 matrix instructions" in line]
    assert len(warned) == (0 if products else 1) and all(line.endswith("pass --dtype fp32") for line in warned)


def test_an_out_that_is_a_file_is_one_line(prepared: Path, tmp_path: Path) -> None:
    from attnlab.train.loop import Trainer

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is a file") as error:
        Trainer(TrainConfig(data=str(prepared), out=str(tmp_path / "notes.txt"), preset="tiny", compile="off"))
    assert "\n" not in str(error.value) and (tmp_path / "notes.txt").read_text() == "mine"


def test_a_resumed_run_cleans_and_redoes_what_a_kill_left_half_done(prepared: Path, tmp_path: Path, capsys) -> None:
    """A kill mid-save left `.step_N.tmp-*` forever; a kill while evaluating the checkpoint it
    had just published lost that step's dev report for good; resuming a finished run printed a
    bogus progress bar and nothing else."""
    from attnlab.train.commands import cli
    from attnlab.train.loop import Trainer

    run = tmp_path / "run"
    settings = {"data": str(prepared), "out": str(run), "preset": "tiny", "compile": "off", "probes": 0}
    settings |= {"eval_sentences": 3, "save_every": 2, "max_tokens": 600}
    capsys.readouterr()
    log = io.StringIO()  # a notebook's log goes where it asks (on stderr JupyterLab shows it red, as an error)
    Trainer(TrainConfig(**settings, max_steps=2), log=log).run()
    assert "attnlab train: tiny" in log.getvalue() and "step 2: dev_loss" in log.getvalue()
    assert capsys.readouterr().err == ""
    metrics = run / "metrics.jsonl"
    metrics.write_text("".join(line + "\n" for line in metrics.read_text().splitlines() if "dev_" not in line))
    (run / "checkpoints" / ".step_3.tmp-x1y2").mkdir()
    Trainer(TrainConfig(**settings, max_steps=3)).run()
    assert not list((run / "checkpoints").glob(".step_*"))
    dev_steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if "dev_" in line]
    assert dev_steps == [2, 3]
    capsys.readouterr()
    argv = ["--data", str(prepared), "--out", str(run), "--preset", "tiny", "--compile", "off", "--max-steps", "3"]
    assert cli(argv + ["--eval-sentences", "3", "--save-every", "2", "--max-tokens", "600", "--probes", "0"]) == 0
    assert "the run is at step 3, --max-steps 3: nothing to do" in capsys.readouterr().err
    fresh = tmp_path / "fresh"  # killed while writing its first checkpoint: it starts over, and sweeps that too
    (fresh / "checkpoints" / ".step_2.tmp-a1b2").mkdir(parents=True)
    Trainer(TrainConfig(**{**settings, "out": str(fresh)}, max_steps=1)).run()
    assert not list((fresh / "checkpoints").glob(".step_*"))


def _agree_on_two_ranks(rank: int, port: int, settings: list[dict], errors) -> None:
    import torch.distributed as dist

    from attnlab.train.ranks import agree

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        agree(settings[rank], 2)
    except ConfigError as error:
        errors.put((rank, str(error)))
    finally:
        dist.destroy_process_group()


def test_ranks_started_with_other_settings_are_refused_on_every_rank() -> None:
    """A rank with another --max-steps waited forever in a collective the other never reached."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    errors = mp.get_context("spawn").SimpleQueue()
    settings = [{"max_steps": 20, "seed": 1}, {"max_steps": 15, "seed": 1}]
    mp.start_processes(_agree_on_two_ranks, args=(port, settings, errors), nprocs=2, start_method="spawn")
    found = sorted(errors.get() for _ in range(2))
    assert found == [
        (r, "rank 1 was started with other settings than rank 0: max_steps 15 (rank 0: 20)") for r in (0, 1)
    ]


def test_a_preset_beside_a_recipe_replaces_the_recipes_model(capsys) -> None:
    """`--recipe tatoeba-en-zh --preset tiny` trained "tiny with the recipe's d_ff 512" without a word."""
    from attnlab.train.commands import config_from_args

    config = config_from_args(["--recipe", "tatoeba-en-zh", "--preset", "tiny", "p_drop=0.2"])
    assert config.preset == "tiny" and config.overrides == {"p_drop": 0.2}
    assert "--preset tiny replaces recipe tatoeba-en-zh's model" in capsys.readouterr().err


def test_a_second_run_on_the_same_out_is_refused_while_the_first_trains(prepared: Path, tmp_path: Path, capsys) -> None:
    """Two runs on one --out both wrote checkpoints into it and every line of metrics.jsonl twice:
    while one trains (holds --out, as `Trainer.run` does) another is refused in one line (exit 2),
    and once it has finished the same command resumes, also in the same process."""
    from attnlab.cli import main
    from attnlab.train.startup import holding

    run = tmp_path / "run"
    argv = ["train", "--data", str(prepared), "--out", str(run), *TINY, "--compile", "off", "--max-steps", "2"]
    run.mkdir()
    capsys.readouterr()
    with holding(run):  # what a run training there holds
        assert main(argv) == 2
    assert capsys.readouterr().err.endswith(
        f"attnlab train: error: --out {run} is in use by another `attnlab train` run; "
        "wait for it to end or name another run directory\n"
    )
    assert not step_dirs(run) and not (run / "metrics.jsonl").exists()  # it wrote nothing
    assert main(argv) == 0
    assert main([*argv[:-1], "3"]) == 0 and "resumed from" in capsys.readouterr().err  # the lock ended with the run
    assert sorted(step for step, _ in step_dirs(run)) == [2, 3]
