"""Training: Eq. (3), a real short run on Multi30k, exact resume after SIGKILL, DDP = update_freq,
checkpoint averaging, and checkpoints that never unpickle."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnlab.errors import CheckpointError
from attnlab.model.checkpoint import latest_valid, load_model, load_trainer_state, save_checkpoint, step_dirs
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer
from attnlab.train.average import average
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
def test_short_real_run_learns(prepared: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [
        "--max-minutes",
        "1.2",
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
    ]
    command = [PY, "-m", "attnlab", "train", "--data", str(prepared), "--out", str(run), "--preset", "tiny", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = [loss for _, loss in _losses(run)]
    assert losses[-1] < losses[0] - 1.5, losses
    dev = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "dev_bleu" in line]
    assert dev and dev[-1]["dev_bleu"] > 0 and dev[-1]["dev_ppl"] < 1000  # uniform over the 2,000 pieces would be 2,000
    assert len(list((run / "probes").glob("step_*/probe_*.trace"))) == 2


@pytest.mark.slow
def test_sigkill_and_resume_is_bit_exact(prepared: Path, tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    _finish(_train(prepared, straight, "--max-steps", "16", "--save-every", "4", "--keep-last", "0"))
    killed = tmp_path / "killed"
    proc = _train(prepared, killed, "--max-steps", "16", "--save-every", "4", "--keep-last", "0")
    deadline = time.time() + 240
    while time.time() < deadline and not (killed / "checkpoints" / "step_8").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoints" / "step_8").exists()
    assert not (killed / "checkpoints" / "step_16").exists(), "the run finished before it could be killed"
    err = _finish(_train(prepared, killed, "--max-steps", "16", "--save-every", "4", "--keep-last", "0"))
    assert "resumed from" in err
    a, b = _params(straight), _params(killed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _losses(straight) == _losses(killed)


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
    with pytest.warns(UserWarning, match="step_2"):
        assert latest_valid(tmp_path / "run").name == "step_1"
    with pytest.raises(CheckpointError, match="truncated"):
        load_model(tmp_path / "run" / "checkpoints" / "step_2")


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


def test_average_is_elementwise_mean(tmp_path: Path) -> None:
    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    a, b = Transformer(preset("tiny")), Transformer(preset("tiny"))
    dirs = [save_checkpoint(tmp_path / name, m, spm) for name, m in (("a", a), ("b", b))]
    mean = average(dirs)
    for name, tensor in a.state_dict().items():
        assert torch.allclose(mean[name], (tensor + b.state_dict()[name]) / 2)


@pytest.mark.slow
def test_ddp_two_ranks_equal_update_freq_two(prepared: Path, tmp_path: Path) -> None:
    common = ["--max-steps", "4", "--save-every", "4", "p_drop=0.0"]
    single = _train(prepared, tmp_path / "single", *common, "--update-freq", "2")
    ddp = _train(
        prepared,
        tmp_path / "ddp",
        *common,
        launcher=[PY, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517", "-m", "attnlab"],
    )
    _finish(single)
    _finish(ddp)
    a, b = _params(tmp_path / "single"), _params(tmp_path / "ddp")
    assert all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    assert not torch.equal(a["embed.weight"], Transformer(preset("tiny", vocab_size=2000)).state_dict()["embed.weight"])


def test_average_run_ships_probe_snapshots(tmp_path: Path) -> None:
    from attnlab.train.average import average_run

    spm = tmp_path / "spm.model"
    spm.write_bytes(b"x")
    run = tmp_path / "run"
    for step in (10, 20, 30):
        save_checkpoint(run / "checkpoints" / f"step_{step}", Transformer(preset("tiny")), spm)
        (run / "probes" / f"step_{step}").mkdir(parents=True)
        (run / "probes" / f"step_{step}" / "probe_0.trace").write_bytes(b"t")
    out = average_run(run, 2, tmp_path / "avg", torch.bfloat16, snapshots=2)
    assert sorted(p.name for p in (out / "probes").iterdir()) == ["step_10", "step_30"]
    model, meta = load_model(out)
    assert meta["averaged"] == ["step_20", "step_30"]
    assert (out / "model.safetensors").stat().st_size < (
        run / "checkpoints" / "step_30" / "model.safetensors"
    ).stat().st_size
