"""Faults during training: a full disk mid-checkpoint, SIGTERM mid-checkpoint, a non-finite loss,
a log line cut short, prepared data cut short. Each leaves every checkpoint already written as
a healthy run writes it, and the same command resumes the run to the weights of a run that had
no fault (bit for bit: training is deterministic on CPU).

The runs go through `attnlab.cli.main` in this process, so the exit status and the one-line
message are the user's; the faults are injected by patching the writer or the loss.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import numpy as np
import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from attnlab.cli import main
from attnlab.data.prepared import ParallelData
from attnlab.errors import DataError
from attnlab.model import checkpoint
from attnlab.model.checkpoint import step_dirs, verify
from attnlab.train import loop
from attnlab.train.guard import TrainingError
from attnlab.train.metrics import MetricsLog
from attnlab.train.regime import label_smoothed_loss, make_loss

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    *("--preset", "tiny", "--max-tokens", "600", "--eval-sentences", "0", "--probes", "0"),
    *("--log-every", "1", "--save-every", "2", "--keep-last", "0", "--warmup", "10", "--max-steps", "6"),
]


@pytest.fixture(scope="module")
def prepared(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prep") / "m30k"
    prepare = ["data", "prepare", "multi30k", "--data-dir", str(data_dir), "--vocab-size", "2000", "--out", str(out)]
    assert main(prepare) == 0
    return out


def _train(data: Path, run: Path, *extra: str) -> int:
    return main(["train", "--data", str(data), "--out", str(run), *ARGS, *extra])


@pytest.fixture(scope="module")
def reference(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same 6 steps without a fault: checkpoints at steps 2, 4 and 6."""
    run = tmp_path_factory.mktemp("reference") / "run"
    assert _train(prepared, run) == 0
    return run


def _digests(run: Path) -> dict[int, dict[str, str]]:
    """sha256 of the weights and trainer state of each checkpoint, after a deep verify."""
    found = {}
    for step, path in step_dirs(run):
        files = verify(path)["files"]
        found[step] = {name: files[name]["sha256"] for name in ("model.safetensors", "trainer.safetensors")}
    return found


def _log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in _log(run)]


def _error_line(err: str) -> str:
    """The one line the CLI printed for an AttnlabError (and no traceback)."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("attnlab train: error: ")]
    assert len(lines) == 1, err[-2000:]
    return lines[0]


def _assert_resumes_to(prepared: Path, run: Path, reference: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same command again: resumes and ends where the run without a fault ended."""
    assert _train(prepared, run) == 0
    assert "resumed from" in capsys.readouterr().err
    assert _digests(run) == _digests(reference)
    assert _losses(run) == _losses(reference)


# What a full disk raises in the weights' write: safetensors wraps the OS's error in its own (a
# real tmpfs of 5 MB gave this one; it was a traceback while only OSError was caught), or an OSError.
FULL_DISK = {
    "safetensors": lambda filename: SafetensorError(
        "Error while serializing: I/O error: No space left on device (os error 28)"
    ),
    "os": lambda filename: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename),
}


@pytest.mark.parametrize("raised", sorted(FULL_DISK))
def test_disk_full_while_writing_a_checkpoint(
    prepared: Path,
    reference: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: str,
) -> None:
    """ENOSPC half way through step_4's weights: one line naming it, exit 2, step_2 as written,
    no temporary directory left; after space is freed the same command resumes."""
    write = checkpoint.save_file

    def full_disk(tensors: dict[str, torch.Tensor], filename: str, metadata: dict | None = None) -> None:
        write(tensors, filename, metadata=metadata)
        if ".step_4.tmp-" in filename:
            with open(filename, "r+b") as handle:
                handle.truncate(os.path.getsize(filename) // 2)
            raise FULL_DISK[raised](filename)

    monkeypatch.setattr(checkpoint, "save_file", full_disk)
    run = tmp_path / "run"
    assert _train(prepared, run) == 2
    line = _error_line(capsys.readouterr().err)
    assert "step_4" in line and "(No space left on device)" in line and "resume" in line
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2"]  # no .step_4.tmp-*
    assert _digests(run) == {2: _digests(reference)[2]}
    monkeypatch.undo()
    _assert_resumes_to(prepared, run, reference, capsys)


def test_disk_full_at_the_first_checkpoint_does_not_promise_a_resume(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no checkpoint yet it said "older checkpoints are intact; ... run the same command to
    resume", and the same command started at step 0."""

    def full_disk(tensors: dict[str, torch.Tensor], filename: str, metadata: dict | None = None) -> None:
        raise FULL_DISK["os"](filename)

    monkeypatch.setattr(checkpoint, "save_file", full_disk)
    assert _train(prepared, tmp_path / "run") == 2
    line = _error_line(capsys.readouterr().err)
    assert "step_2" in line and line.endswith("stopped at step 2, none saved yet: rerun to start over"), line
    assert "older" not in line and "resume" not in line


class Terminated(Exception):
    """Stands in for the death SIGTERM brings when nothing defers it (pytest must live on)."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@pytest.mark.parametrize(("signum", "said"), [(signal.SIGTERM, "by SIGTERM"), (signal.SIGINT, "by Ctrl-C")])
def test_sigterm_or_ctrl_c_while_writing_a_checkpoint(
    prepared: Path,
    reference: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signum: int,
    said: str,
) -> None:
    """SIGTERM (or Ctrl-C) after step_4's weights are written but before its trainer state,
    manifest and rename: the save completes, the run stops at step 4 with status 128 + the
    signal, step_2 is untouched, the handler in place before comes back, and the same command
    resumes. Ctrl-C once deleted the checkpoint being written and lost every update since the last."""
    write = checkpoint.save_file

    def save_then_signal(tensors: dict[str, torch.Tensor], filename: str, metadata: dict | None = None) -> None:
        write(tensors, filename, metadata=metadata)
        if ".step_4.tmp-" in filename and filename.endswith("model.safetensors"):
            os.kill(os.getpid(), signum)

    monkeypatch.setattr(checkpoint, "save_file", save_then_signal)
    previous = signal.signal(signum, _terminate)
    try:
        assert _train(prepared, tmp_path / "run") == 128 + signum
        assert signal.getsignal(signum) is _terminate
    finally:
        signal.signal(signum, previous)
    assert f"stopped {said} at step 4" in capsys.readouterr().err
    run = tmp_path / "run"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2", "step_4"]
    assert _digests(run) == {step: _digests(reference)[step] for step in (2, 4)}
    monkeypatch.undo()
    _assert_resumes_to(prepared, run, reference, capsys)


def _poisoned_loss(bad_call: int, value: float) -> Callable[[bool], Callable]:
    """A `make_loss` whose loss is multiplied by `value` (nan, inf) on its `bad_call`-th call;
    with --update-freq 1 call N is step N."""
    calls = itertools.count(1)

    def poisoned(compile: bool = False) -> Callable:
        real = make_loss(compile)  # the reference run's own loss: the same values on the other calls

        def loss_fn(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int) -> tuple:
            loss, nll = real(logits, target, eps, pad_id)
            return (loss * value, nll) if next(calls) == bad_call else (loss, nll)

        return loss_fn

    return poisoned


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(
    prepared: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(loop, "make_loss", _poisoned_loss(3, float("nan")))
    run = tmp_path / "run"
    assert _train(prepared, run) == 2
    line = _error_line(capsys.readouterr().err)
    assert "step 3:" in line and "not finite" in line and "step_2" in line and "--skip-nonfinite" in line
    assert _digests(run) == {2: _digests(reference)[2]}
    assert [r["step"] for r in _log(run)] == [1, 2]  # nothing logged for the failed update
    monkeypatch.undo()
    _assert_resumes_to(prepared, run, reference, capsys)


def test_skip_nonfinite_skips_the_update_and_counts_it(
    prepared: Path, reference: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "make_loss", _poisoned_loss(3, float("inf")))
    run = tmp_path / "run"
    assert _train(prepared, run, "--skip-nonfinite") == 0
    log = _log(run)
    assert [r["step"] for r in log] == [1, 2, 3, 4, 5, 6]  # six updates applied, one skipped
    assert [r["skipped_updates"] for r in log] == [0, 0, 1, 1, 1, 1]
    assert all(np.isfinite(r["loss"]) for r in log)
    digests = _digests(run)
    assert digests[2] == _digests(reference)[2] and digests[6] != _digests(reference)[6]
    assert json.loads((run / "checkpoints" / "step_6" / "trainer.json").read_text())["skipped"] == 1
    weights = load_file(str(run / "checkpoints" / "step_6" / "model.safetensors"))
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())


def test_skip_nonfinite_stops_when_every_update_is_skipped(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Weights that give nan on every batch once skipped forever: the step counter still, nothing
    logged, the process busy until killed."""
    calls = itertools.count(1)

    def broken_from_step_3(logits: torch.Tensor, target: torch.Tensor, eps: float, pad_id: int) -> tuple:
        loss, nll = label_smoothed_loss(logits, target, eps, pad_id)
        return (loss * float("nan"), nll) if next(calls) >= 3 else (loss, nll)

    monkeypatch.setattr(loop, "make_loss", lambda compile=False: broken_from_step_3)
    monkeypatch.setattr(loop, "SKIPS_IN_A_ROW", 5)
    run = tmp_path / "run"
    assert _train(prepared, run, "--skip-nonfinite") == 2
    line = _error_line(capsys.readouterr().err)
    assert "step 3:" in line and "for 5 updates in a row, all skipped" in line and "step_2" in line, line
    assert "--skip-nonfinite to skip" not in line and [r["step"] for r in _log(run)] == [1, 2]


def test_a_run_whose_every_checkpoint_is_damaged_is_not_started_over(
    prepared: Path, reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It began again at step 0 after a warning per checkpoint, emptied its log and overwrote
    the damaged checkpoints."""
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    for step in (run / "checkpoints").iterdir():
        weights = step / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
    log = (run / "metrics.jsonl").read_text()
    assert _train(prepared, run) == 2
    line = _error_line(capsys.readouterr().err)
    assert "all 3 checkpoints are damaged" in line and "refusing to start the run over" in line, line
    assert (run / "metrics.jsonl").read_text() == log and len(list((run / "checkpoints").iterdir())) == 3


def test_a_log_line_cut_short_is_dropped_on_resume(
    prepared: Path, reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed while writing step 5's log line leaves half a line after checkpoint step_4."""
    run = tmp_path / "run"
    assert _train(prepared, run, "--max-steps", "4") == 0
    with (run / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 5, "loss": 6.')
    _assert_resumes_to(prepared, run, reference, capsys)  # every line parses, each step once


def test_a_run_killed_before_its_first_checkpoint_starts_its_log_over(
    prepared: Path, reference: Path, tmp_path: Path
) -> None:
    """Its lines describe weights that were never saved, and its last line may be cut short."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 9.0}\n{"step": 2, "lo')
    assert _train(prepared, run, "--max-steps", "2") == 0
    assert _losses(run) == _losses(reference)[:2]


def test_a_log_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").mkdir()  # as good as a full disk for open("a")
    with pytest.raises(TrainingError, match=r"metrics\.jsonl: could not log step 7") as error:
        MetricsLog(tmp_path).write({"step": 7, "loss": 1.0})
    assert "\n" not in str(error.value)


def _cut(path: Path, nbytes: int) -> None:
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size - nbytes)


@pytest.mark.parametrize(("name", "nbytes"), [("train.src.bin", 2), ("train.tgt.idx", 8), ("train.tgt.idx", 3)])
def test_prepared_files_cut_short_are_a_data_error_naming_the_file(
    prepared: Path,
    reference: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    nbytes: int,
) -> None:
    """Cut after step 2 was saved: the resumed run refuses with one line naming the file, before
    it trains (step_2 is untouched); with the file restored it resumes to the reference."""
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    run = tmp_path / "run"
    assert _train(data, run, "--max-steps", "2") == 0
    _cut(data / name, nbytes)
    assert _train(data, run) == 2
    line = _error_line(capsys.readouterr().err)
    assert f"{data / name}:" in line and "cut short" in line
    assert _digests(run) == {2: _digests(reference)[2]}
    shutil.copyfile(prepared / name, data / name)
    _assert_resumes_to(data, run, reference, capsys)


def test_a_new_run_on_data_cut_short_leaves_no_run_directory(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ids were checked at the first batch, after --out was made: an empty run directory stayed."""
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    _cut(data / "train.tgt.bin", 2)
    run = tmp_path / "run"
    assert _train(data, run) == 2
    assert "train.tgt.bin: " in _error_line(capsys.readouterr().err) and not run.exists()


@pytest.mark.parametrize("name", ["train.src.bin", "train.src.idx", "train.src.txt"])
def test_reading_a_pair_from_a_cut_file_is_a_data_error(prepared: Path, tmp_path: Path, name: str) -> None:
    """Not an IndexError, and not the last sentence silently cut by a slice past the map's end."""
    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    _cut(data / name, 1)
    split = ParallelData(data, "train")
    read = split.src_text if name.endswith(".txt") else split.src
    with pytest.raises(DataError, match=rf"{name}: .*cut short"):
        read(len(split) - 1)


def _as_nobody(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI run by a user without rights to what root made (root reads and writes anything,
    so a permission fault needs another user); skipped where this is not root or has no setpriv."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a command as another user")
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "HOME": "/tmp", "TORCHINDUCTOR_CACHE_DIR": "/tmp/attnlab-nobody-inductor"}
    probe = subprocess.run([*drop, sys.executable, "-c", "import attnlab.cli"], capture_output=True, env=env)
    if probe.returncode != 0:  # a checkout under a directory only root may enter (/root/...)
        pytest.skip("the other user cannot run this checkout's Python")
    cli = [sys.executable, "-c", "import sys; from attnlab.cli import main; sys.exit(main())"]
    return subprocess.run([*drop, *cli, *argv], input=stdin, capture_output=True, text=True, env=env, timeout=300)


def _shared() -> Path:
    """A directory under /tmp that every user may enter (pytest's are root's alone)."""
    shared = Path(tempfile.mkdtemp(prefix="attnlab-faults-", dir="/tmp"))
    shared.chmod(0o755)
    return shared


def test_a_checkpoint_the_user_may_not_read_is_one_line(tmp_path: Path) -> None:
    """Every command that loads a model printed a PermissionError traceback for a weights file
    (or checkpoint directory) the user may not read."""
    shared = _shared()
    try:
        model = shared / "model"
        shutil.copytree(ROOT / "checkpoints" / "multi30k-en-de", model)
        for path in [model, *model.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (model / "model.safetensors").chmod(0o000)
        done = _as_nobody("translate", "--checkpoint", str(model), stdin="A dog runs .\n")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.strip() == (
            f"attnlab translate: error: {model}: cannot read model.safetensors (Permission denied)"
        )
    finally:
        shutil.rmtree(shared)


def test_resuming_a_run_the_user_may_not_write_is_one_line(prepared: Path, reference: Path) -> None:
    """Resuming another user's run (readable, not writable) was a PermissionError traceback from
    its metrics log, after the model was built."""
    shared = _shared()
    try:
        data, run = shared / "data", shared / "run"
        shutil.copytree(prepared, data)
        shutil.copytree(reference, run)
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        done = _as_nobody("train", "--data", str(data), "--out", str(run), *ARGS[:-1], "8", "--compile", "off")
        assert done.returncode == 2 and _error_line(done.stderr) == (
            f"attnlab train: error: --out {run} cannot be written (Permission denied); name another run directory"
        )
    finally:
        shutil.rmtree(shared)


def test_a_checkpoint_replaced_stays_whole_when_the_new_one_cannot_take_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replacing a checkpoint (`average --force`) removed the old one before the new one's rename:
    a failure there (or a kill) left neither. Where the two cannot be swapped in one step (not
    Linux), the old one is renamed aside, back on a failure, and removed only once the new one is
    in place."""
    from attnlab import publish
    from attnlab.model.config import ModelConfig
    from attnlab.model.transformer import Transformer

    monkeypatch.setattr(publish, "exchanged", lambda first, second: False)

    spm = ROOT / "checkpoints" / "multi30k-en-de" / "spm.model"
    target = tmp_path / "ckpt"
    first = Transformer(ModelConfig(n_layers=1, d_model=16, d_ff=32, n_heads=2, vocab_size=40, max_len=16))
    checkpoint.save_checkpoint(target, first, spm, meta={"which": "old"})
    before = _tree_digest(target)
    real, renames = os.replace, []

    def failing(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        renames.append(Path(dst))
        if renames.count(target) == 1 and Path(dst) == target:  # the new one taking the old one's place
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(dst))
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(checkpoint.CheckpointError, match=r"\(Input/output error\); nothing was written"):
        checkpoint.save_checkpoint(target, first, spm, meta={"which": "new"})
    assert _tree_digest(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    monkeypatch.setattr(os, "replace", real)
    checkpoint.save_checkpoint(target, first, spm, meta={"which": "new"})
    assert json.loads((target / "config.json").read_text())["meta"]["which"] == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # the old one, aside, removed


KILLED_AFTER = """
import os, sys
from attnlab import publish
from attnlab.model.checkpoint import update_meta

calls = [0]
def counted(rename):
    def call(*args):
        done = rename(*args)
        calls[0] += 1
        if calls[0] == int(sys.argv[2]):
            os._exit(137)  # killed right after this rename
        return done
    return call
os.replace = counted(os.replace)
publish.exchanged = counted(publish.exchanged)
update_meta(sys.argv[1], which="new")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="one-step swaps are Linux's renameat2")
def test_a_checkpoint_whose_meta_is_updated_loads_whenever_the_update_is_killed(tmp_path: Path) -> None:
    """`update_meta` (`evaluate --save-best`) renamed a new config.json, then a new manifest, over
    the old ones: killed between the two, the checkpoint no longer loaded ("config.json is not the
    file this checkpoint was written with"). Killed after any of its renames, it now loads, with
    the old meta or the new one, and its weights are the same file (linked, not copied)."""
    from attnlab.model.config import ModelConfig
    from attnlab.model.transformer import Transformer

    spm = ROOT / "checkpoints" / "multi30k-en-de" / "spm.model"
    model = Transformer(ModelConfig(n_layers=1, d_model=16, d_ff=32, n_heads=2, vocab_size=40, max_len=16))
    for kill in itertools.count(1):
        target = tmp_path / f"ckpt-{kill}"
        checkpoint.save_checkpoint(target, model, spm, meta={"which": "old"})
        weights = (target / "model.safetensors").stat().st_ino
        done = subprocess.run(
            [sys.executable, "-c", KILLED_AFTER, str(target), str(kill)], capture_output=True, text=True
        )
        assert done.returncode in (0, 137), done.stderr
        _, meta = checkpoint.load_model(target)
        assert meta["which"] == ("new" if done.returncode == 0 else meta["which"]) and meta["which"] in ("old", "new")
        assert (target / "model.safetensors").stat().st_ino == weights
        if done.returncode == 0:
            break
    assert kill >= 2  # it was killed at least once


def _tree_digest(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}
