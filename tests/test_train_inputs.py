"""`attnlab train` refuses at start-up, in one line, what used to fail late, train something else
or measure nothing: misspelt flags, a batch 8× the paper's, alignment gold of other languages,
pairs the model cannot read, a model that cannot fit, an --out that cannot be, unprepared recipe
data. Each test starts no training beyond one tiny step."""

from __future__ import annotations

import math
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlab.cli import main
from attnlab.errors import AttnlabError, CheckpointError, ConfigError
from attnlab.model.config import preset
from attnlab.train import label_smoothed_loss, learning_rate, make_optimizer, startup
from attnlab.train.commands import build_parser, config_from_args
from attnlab.train.loop import TrainConfig, Trainer
from attnlab.train.recipes import RECIPES
from attnlab.train.resume import check_same_model

ROOT = Path(__file__).resolve().parents[1]

TINY = [
    *("--preset", "tiny", "--max-tokens", "600", "--max-steps", "1"),
    *("--eval-sentences", "0", "--probes", "0", "--compile", "off"),
]


def _prepare(data_dir: Path, out: Path, *extra: str) -> Path:
    argv = ["data", "prepare", "multi30k", "--data-dir", str(data_dir), "--vocab-size", "2000", "--out", str(out)]
    assert main([*argv, *extra]) == 0
    return out


@pytest.fixture(scope="module")
def prepared(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _prepare(data_dir, tmp_path_factory.mktemp("prep") / "m30k")


def _refused(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    """The one line `attnlab train ARGV` stops with (status 2, no traceback)."""
    capsys.readouterr()
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("attnlab train: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_the_wmt14_recipes_read_the_papers_batch_per_update_and_save_every_ten_minutes() -> None:
    """§5.1's ~25k + 25k tokens are one update across the paper's 8 GPUs; the recipes said
    "8 GPUs × ~25k tokens", 8× that. §6.1 saves every 10 minutes: 1,250 base updates at 0.4 s
    (1,500, ten minutes, left the last 5 of 100,000 unevenly spaced: 94.5k ... 99k, 100k), 600 big
    ones at 1.0 s (big saved every 1,500, 25 minutes); the checkpoints averaged are evenly spaced."""
    for name, save_every in (("wmt14-base", 1250), ("wmt14-big", 600)):
        config = config_from_args(["--recipe", name])
        assert config.max_tokens * config.update_freq == 25_000  # per update, in one process
        assert config.save_every == save_every and config.max_steps % save_every == 0
    eight = config_from_args(["--recipe", "wmt14-base", "--max-tokens", str(25_000 // 8)])
    assert "up to 25,000 source and 25,000 target tokens per update" in startup.tokens_line(eight, 8)


def test_the_readme_splits_the_papers_batch_over_the_processes() -> None:
    """The README's `torchrun --nproc_per_node=8 ... --recipe wmt14-base` was "the paper's setup"
    with max_tokens 25,000 on each of 8 processes: 200k tokens an update."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    commands = readme.replace("\\\n", " ").splitlines()  # a command continued with \ is one line
    many = [line for line in commands if "torchrun" in line and "--recipe wmt14" in line]
    assert many and all("--max-tokens $((25000 / W))" in line for line in many), many
    assert "`--max-tokens` is per process and micro-batch" in " ".join(readme.split())


def test_the_tokens_per_update_are_said_at_start_up(prepared: Path, tmp_path: Path, capsys) -> None:
    out = ["--data", str(prepared), "--out", str(tmp_path / "run"), "--max-steps", "1", "--update-freq", "2"]
    assert main(["train", *TINY, *out]) == 0
    assert (
        "up to 1,200 source and 1,200 target tokens per update, each pair counted at its longer side (max_tokens 600 per "
        "process and micro-batch × 1 process(es) × update_freq 2" in capsys.readouterr().err
    )


@pytest.mark.parametrize(("flag", "meant"), [("--lr", "--lr-scale"), ("--warm", "--warmup")])
def test_a_shortened_flag_is_refused_not_taken_for_another(flag: str, meant: str, capsys) -> None:
    """`--lr 0.1` trained with lr_scale 0.1 and `--warm 10` with warmup 10, by argparse's prefix
    matching, without a word."""
    with pytest.raises(ConfigError, match=f"unrecognized option {flag} \\(did you mean {meant}\\?\\)"):
        config_from_args(["--data", "d", "--out", "o", flag, "10"])
    line = _refused(capsys, ["--data", "d", "--out", "o", flag, "10"])
    assert f"unrecognized option {flag}" in line


def test_an_override_given_twice_is_refused_and_one_over_a_recipes_is_taken(capsys) -> None:
    """`d_model=256 d_model=512` trained with d_model 512 without a word (the last one kept), and so
    did `d_model=256 d-model=512`, one key however spelt. A key on the command line over a recipe's
    own (tatoeba-en-zh's d_ff 512) is not twice: the command line wins."""
    base = ["--data", "d", "--out", "o"]
    for twice in (["d_model=256", "d_model=512"], ["--d_model=256", "d-model=512"]):
        with pytest.raises(ConfigError) as error:
            config_from_args([*base, *twice, "p_drop=0.3"])
        assert str(error.value) == f"override d_model is given twice ({twice[0]} and {twice[1]}); give it once"
        assert _refused(capsys, [*base, *twice]).endswith(f"({twice[0]} and {twice[1]}); give it once")
    assert RECIPES["tatoeba-en-zh"]["overrides"] == {"d_ff": 512}
    assert config_from_args(["--recipe", "tatoeba-en-zh"]).overrides == {"d_ff": 512}
    assert config_from_args(["--recipe", "tatoeba-en-zh", "d_ff=1024", "p_drop=0.2"]).overrides == {
        "d_ff": 1024,
        "p_drop": 0.2,
    }
    with pytest.raises(ConfigError, match=r"override d_ff is given twice \(d_ff=1024 and d-ff=2048\)"):
        config_from_args(["--recipe", "tatoeba-en-zh", "d_ff=1024", "d-ff=2048"])
    assert main(["flops", "--preset", "tiny", "d_ff=64", "d_ff=128"]) == 2  # flops reads overrides alike
    assert "override d_ff is given twice (d_ff=64 and d_ff=128)" in capsys.readouterr().err


def test_alignment_gold_of_other_languages_is_refused(prepared: Path, data_dir: Path, tmp_path: Path, capsys) -> None:
    """Zh-En (or EN-FR) links read on an EN→DE model printed a dev_aer at every checkpoint; a
    shared set given by its path is the same set (it skipped the check, and the direction)."""
    for number, name in enumerate(("zhen_dev", "enfr", str(data_dir / "alignment" / "zhen_dev"))):
        argv = [*TINY, "--data", str(prepared), "--out", str(tmp_path / f"run{number}"), "--align-gold", name]
        assert "but the data is en→de" in _refused(capsys, argv)
        assert not (tmp_path / f"run{number}").exists()


def test_an_alignment_set_of_ones_own_is_read_at_start_up(prepared: Path, tmp_path: Path, capsys) -> None:
    """`--align-gold STEM` only had to exist: a gold written from 0 (as `attnlab align` writes
    links) failed at the first checkpoint, a thousand updates on; tab-separated pairs scored AER
    1.0 at every checkpoint; a link past its sentence was scored."""
    stem = tmp_path / "mine"
    cases = {
        "0-0 1-1\n": (" ||| ", "'0-0' has index 0 in a 1-indexed file"),
        "1-1 2-5\n": (" ||| ", "points past"),
        "1-1 2-2\n": ("\t", f"{stem}.src-tgt:1 is not a `source ||| target` pair"),
    }
    for number, (gold, (between, said)) in enumerate(cases.items()):
        Path(f"{stem}.src-tgt").write_text(f"a dog{between}ein hund\n", encoding="utf-8")
        Path(f"{stem}.gold").write_text(gold, encoding="utf-8")
        out = tmp_path / f"run{number}"
        line = _refused(capsys, [*TINY, "--data", str(prepared), "--out", str(out), "--align-gold", str(stem)])
        assert line.startswith(f"attnlab train: error: --align-gold {stem}: ") and said in line, line
        assert not out.exists()


def test_pairs_longer_than_the_model_takes_are_refused_at_start_up(
    prepared: Path, data_dir: Path, tmp_path: Path, capsys
) -> None:
    """A dev pair too long for max_len failed at the first checkpoint's dev report (and at every
    resume); a training pair when a batch first drew it. Both are refused before the model is
    built; a dev pair is refused, not skipped (the dev numbers stay the first N pairs')."""
    short = _prepare(data_dir, tmp_path / "short", "--max-len", "40")  # training pairs fit max_len=41
    run = ["--out", str(tmp_path / "run"), "max_len=41"]
    line = _refused(capsys, [*TINY, "--data", str(short), *run, "--eval-sentences", "200", "--probes", "4"])
    assert "valid pair 5 of" in line and "has 37 source and 44 target tokens" in line
    assert "(--eval-sentences 5 --probes 4) or give the model max_len=45" in line
    line = _refused(capsys, [*TINY, "--data", str(short), *run, "--eval-sentences", "0", "--probes", "8"])
    assert "valid pair 5" in line and "(--eval-sentences 0 --probes 5)" in line
    assert Trainer(config_from_args([*TINY, "--data", str(short), *run, "--eval-sentences", "5"])).step == 0
    line = _refused(capsys, [*TINY, "--data", str(prepared), "--out", str(tmp_path / "long"), "max_len=60"])
    assert "training pairs with up to 73 tokens on a side" in line and "--max-len 59" in line


def test_a_model_that_cannot_fit_is_one_line(prepared: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    """`d_ff=1000000000` was a DefaultCPUAllocator traceback; `n_layers=1000000` built layers for
    minutes before the kernel killed the process. (Both sizes are past ModelConfig's bounds, which
    refuse them first; the sizes here are inside them.)"""
    run = [*TINY, "--data", str(prepared), "--out", str(tmp_path / "run")]
    line = _refused(capsys, [*run, "n_layers=1024", "d_ff=1000000"])
    assert "the model has 264,243,246,080 parameters: its weights, gradients and Adam's moments need" in line
    assert not (tmp_path / "run").exists()  # refused before --out is created
    monkeypatch.setattr(startup, "free_memory", lambda device: 2**30)
    with pytest.raises(ConfigError, match="has 84,998,656 parameters.* more than the 1.0 GiB free on cpu"):
        startup.check_fits(preset("tiny", n_layers=1024), torch.device("cpu"))  # unbuilt, so safe unfixed
    base = preset("base")  # 63M parameters: 0.94 GiB for weights, gradients and Adam's moments
    monkeypatch.setattr(startup, "free_memory", lambda device: int(1.5 * 2**30))
    assert startup.check_fits(base, torch.device("cpu")) == startup.parameters_of(base)  # one process: fits
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two torchrun processes on this machine's one memory
    with pytest.raises(
        ConfigError, match=r"need 1\.9 GiB, more than the 1\.5 GiB free on cpu \(2 processes of this run share it\)"
    ):
        startup.check_fits(base, torch.device("cpu"))
    monkeypatch.delenv("LOCAL_WORLD_SIZE")

    def out_of_memory(model):  # an allocation the estimate let through fails anyway
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(startup, "free_memory", lambda device: None)
    monkeypatch.setattr(startup, "make_optimizer", out_of_memory)
    assert "parameters: it does not fit in memory on cpu" in _refused(capsys, run)
    monkeypatch.setattr(startup, "make_optimizer", lambda model: 1 / 0)  # any other failure is a bug: a traceback
    with pytest.raises(ZeroDivisionError):
        main(["train", *run])


def test_a_micro_batch_that_does_not_fit_is_one_line(prepared: Path, tmp_path: Path) -> None:
    """The model fitted and its first micro-batch's activations did not (--max-tokens too large
    for the machine, as often on a smaller GPU): a DefaultCPUAllocator traceback from the dropout
    masks. Here the machine is made small by a 3 GiB limit on the process's address space."""

    def small_machine() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.RLIM_INFINITY))

    run = [*TINY, "--data", str(prepared), "--out", str(tmp_path / "run"), "--max-tokens", "200000"]
    done = subprocess.run(
        [sys.executable, "-m", "attnlab", "train", *run],
        preexec_fn=small_machine,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert re.search(
        r"attnlab train: error: a micro-batch of [\d,]+ pairs \([\d,]+ target tokens, padded to \d+ and \d+\) does "
        r"not fit in memory on cpu; lower --max-tokens, and raise --update-freq to keep the tokens per update$",
        done.stderr.strip(),
    ), done.stderr[-2000:]


def test_an_out_that_cannot_be_created_is_one_line_before_the_model(prepared: Path, tmp_path: Path, capsys) -> None:
    """`--out /proc/xx` was a FileNotFoundError after the model was built."""
    (tmp_path / "notes.txt").write_text("mine")
    line = _refused(capsys, [*TINY, "--data", str(prepared), "--out", str(tmp_path / "notes.txt" / "run")])
    assert "notes.txt/run cannot be created" in line
    shipped = tmp_path / "shipped"  # a run grew inside a checkpoint, exit 0, and it kept its old model
    shutil.copytree(ROOT / "checkpoints" / "multi30k-en-de", shipped, ignore=shutil.ignore_patterns("probes"))
    before = sorted(p.name for p in shipped.iterdir())
    line = _refused(capsys, [*TINY, "--data", str(prepared), "--out", str(shipped)])
    assert line.endswith(
        f"--out {shipped} is a checkpoint, not a run; name a run directory (a new one, or a run to resume)"
    )
    assert sorted(p.name for p in shipped.iterdir()) == before
    mine = tmp_path / "mine"  # a directory of the user's own files: a run's checkpoints/ went in among them
    mine.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (mine / name).write_text("mine")
    line = _refused(capsys, [*TINY, "--data", str(prepared), "--out", str(mine)])
    assert line.endswith(
        f"--out {mine} holds other files (a.txt, b.txt, c.txt, …) and no run; "
        "name a run directory (a new one, or a run to resume)"
    )
    assert sorted(p.name for p in mine.iterdir()) == ["a.txt", "b.txt", "c.txt", "d.txt"]


@pytest.mark.parametrize("setting", [("--seed", "99999999999999999999999"), ("--max-tokens", "99999999999999999999")])
def test_a_seed_or_budget_too_large_is_one_line_before_the_run_directory(
    prepared: Path, tmp_path: Path, capsys, setting: tuple[str, str]
) -> None:
    """Both were OverflowError tracebacks (torch.manual_seed, the batcher) that left an empty run."""
    line = _refused(capsys, [*TINY, *setting, "--data", str(prepared), "--out", str(tmp_path / "run")])
    name = setting[0].removeprefix("--").replace("-", "_")
    assert line.startswith(f"attnlab train: error: {name} must be a whole number ≥ "), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        (("--max-tokens", "10"), "pairs need more than --max-tokens 10 on their own"),
        (("--update-freq", "10000000"), "pairs cannot fill 1 ranks × 10000000 micro-batches per update"),
    ],
)
def test_a_budget_too_small_for_the_data_is_one_line_before_the_model_and_run_directory(
    prepared: Path, tmp_path: Path, capsys, monkeypatch, setting: tuple[str, str], said: str
) -> None:
    """Both were refused by the batcher after --out was made and the model built (minutes for a
    big one), leaving an empty run directory behind."""
    monkeypatch.setattr("attnlab.train.loop.build", lambda *_: pytest.fail("the model was built before the check"))
    line = _refused(capsys, [*TINY, *setting, "--data", str(prepared), "--out", str(tmp_path / "run")])
    assert said in line
    assert not (tmp_path / "run").exists()


def test_a_run_config_of_paths_and_numpy_numbers_saves_and_other_types_are_one_line(
    prepared: Path, tmp_path: Path
) -> None:
    """`TrainConfig(data=Path(...))`, a path as every other attnlab function takes one, trained
    until its first checkpoint and then failed to write it (TypeError: PosixPath is not JSON
    serializable), as NumPy numbers in `overrides` did; overrides=None was a TypeError when the
    model was made, and skip_nonfinite="no" skipped non-finite updates."""
    import numpy as np

    cfg = TrainConfig(
        data=prepared, out=tmp_path / "run", preset="tiny", max_tokens=np.int64(600), max_steps=1,
        eval_sentences=0, probes=0, compile="off", overrides={"n_layers": np.int64(1)},
    )  # fmt: skip
    assert (cfg.data, cfg.out, type(cfg.max_tokens), type(cfg.overrides["n_layers"])) == (
        str(prepared), str(tmp_path / "run"), int, int,
    )  # fmt: skip
    assert Trainer(cfg).run() == tmp_path / "run" / "checkpoints" / "step_1"
    for setting, said in (
        ({"data": None}, "data must be a path, got None"),
        ({"overrides": None}, "overrides must be a dict of model config keys to values, got None"),
        ({"overrides": ["n_layers=1"]}, "overrides must be a dict"),
        ({"skip_nonfinite": "no"}, "skip_nonfinite must be True or False, got 'no'"),
        ({"preset": ["tiny"]}, "preset must be a string"),
        ({"dtype": None}, "dtype must be a string"),
    ):
        with pytest.raises(ConfigError, match=re.escape(said)) as error:
            TrainConfig(**{"data": str(prepared), "out": str(tmp_path / "x"), **setting})
        assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ({"compile": "x"}, "compile must be one of auto, off, loss, model, got 'x'"),
        ({"preset": "huge"}, "unknown preset 'huge'; choose one of: base, big"),
        ({"dtype": "fp16"}, "dtype must be fp32, bf16 or auto, got 'fp16'"),
        ({"device": "gpu"}, "device must be cpu, cuda, cuda:N, mps or auto, got 'gpu'"),
        ({"overrides": {"p_drop": -1}}, "p_drop must be a number in [0, 1), got -1"),
    ],
)
def test_a_bad_choice_is_refused_when_the_config_is_built_and_by_trainer_before_the_run_directory(
    tmp_path: Path, setting: dict, said: str
) -> None:
    """Each was accepted by TrainConfig and refused by Trainer (a bad compile mode after --out was
    made, an empty run directory left behind); a field set after construction, and a Trainer of
    None (a TypeError from dataclasses.asdict), are one line too."""
    run = {"data": str(tmp_path), "out": str(tmp_path / "run")}
    with pytest.raises(ConfigError, match=re.escape(said)):
        TrainConfig(**run, **setting)
    cfg = TrainConfig(**run, preset="tiny", overrides={"eos_id": 1500})  # the data's vocabulary may hold it
    for name, value in setting.items():
        setattr(cfg, name, value)
    with pytest.raises(ConfigError, match=re.escape(said)):
        Trainer(cfg)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="Trainer takes a TrainConfig .*, got NoneType"):
        Trainer(None)  # type: ignore[arg-type]


def test_the_regimes_functions_refuse_bad_input_in_one_line() -> None:
    """`learning_rate(10, -4)` was a complex number, d_model or warmup 0 a ZeroDivisionError; ε 2.0
    weighed the vocabulary negatively; mismatched shapes and an id past the logits were torch
    RuntimeErrors; `make_optimizer(None)` an AttributeError."""
    logits, target = torch.zeros(2, 3, 5), torch.ones(2, 3, dtype=torch.long)
    for call, said in (
        (lambda: learning_rate(10, -4), "d_model must be a positive whole number, got -4"),
        (lambda: learning_rate(1, 0), "d_model must be a positive whole number, got 0"),
        (lambda: learning_rate(1, 512, warmup=0), "warmup must be a positive whole number, got 0"),
        (lambda: label_smoothed_loss(logits, target, eps=2.0, pad_id=0), "eps must be a number in [0, 1), got 2.0"),
        (
            lambda: label_smoothed_loss(logits, target[:, :2], 0.1, 0),
            "the same leading shape; got (2, 3, 5) and (2, 2)",
        ),
        (lambda: label_smoothed_loss(logits, target + 9, 0.1, 0), "target holds id 10, outside the logits' vocabulary"),
        (
            lambda: label_smoothed_loss(logits, target.float(), 0.1, 0),
            "target a tensor of int64 ids, got torch.float32",
        ),
        (lambda: make_optimizer(None), "make_optimizer takes a torch.nn.Module, got None"),
    ):
        with pytest.raises(AttnlabError, match=re.escape(said)) as error:
            call()
        assert "\n" not in str(error.value)
    assert label_smoothed_loss(logits, target, 0.0, 0)[1] == pytest.approx(6 * math.log(5))


def test_a_recipe_without_its_data_names_its_prepare_command(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = _refused(capsys, ["--recipe", "multi30k-en-de"])
    assert line.endswith(f"prepare it with: {RECIPES['multi30k-en-de']['prepare']}")


def test_a_refused_resume_names_only_what_makes_the_model() -> None:
    """`paper` (Table 3's numbers, compare=False) was listed as a difference: a preset has them,
    the same preset with an override has none."""
    mine = preset("base", vocab_size=2000)
    saved = mine.replace(d_ff=1024)
    assert mine.paper and not saved.paper
    with pytest.raises(CheckpointError) as error:
        check_same_model(Path("run/step_1"), saved, mine, Path("spm.model"))
    assert "(d_ff 2048 (the run: 1024)); use another --out" in str(error.value)


def test_the_presets_run_as_long_and_keep_what_the_paper_averages(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--preset big` alone trained 100K updates and kept 5 checkpoints; the paper trains it 300K
    and averages the last 20 (§5.2, §6.1). Base and big read 4,096 tokens an update, a sixth of
    §5.1's ~25,000, now shared by the update's micro-batches. Flags and recipes still win. A run
    set up in Python (`TrainConfig(preset="big")`, as the README shows for a notebook) had none of it."""
    base = ["--data", "d", "--out", "o"]
    big = config_from_args([*base, "--preset", "big"])
    assert (big.max_steps, big.keep_last, big.max_tokens) == (300_000, 20, 25_000)
    notebook = TrainConfig(data="d", out="o", preset="big")
    assert (notebook.max_steps, notebook.keep_last, notebook.max_tokens) == (300_000, 20, 25_000)
    assert TrainConfig(data="d", out="o", preset="big", update_freq=4, keep_last=0).max_tokens == 6250
    assert config_from_args([*base, "--preset", "B-dk16", "--update-freq", "4"]).max_tokens == 6250
    monkeypatch.setenv("WORLD_SIZE", "8")  # torchrun's 8 processes, as the paper's 8 GPUs
    assert config_from_args([*base, "--preset", "big"]).max_tokens == 3125
    monkeypatch.delenv("WORLD_SIZE")
    assert config_from_args([*base, "--preset", "big", "--max-tokens", "900"]).max_tokens == 900
    assert config_from_args([*base, "--preset", "tiny"]).max_tokens == 4096  # (no paper row: the default)
    assert (config_from_args(base).max_steps, config_from_args(base).keep_last) == (100_000, 5)
    assert config_from_args(base).warmup == big.warmup == 4000  # §5.3: warmup_steps = 4000
    mine = config_from_args([*base, "--preset", "big", "--max-steps", "7", "--keep-last", "2"])
    assert (mine.max_steps, mine.keep_last) == (7, 2)
    recipe = config_from_args(["--recipe", "multi30k-en-de", "--preset", "big"])
    assert (recipe.max_steps, recipe.keep_last) == (2000, 8)
    assert (config_from_args([*base, "--preset", "tiny"]).max_steps) == 100_000
    assert "big 300000" in " ".join(build_parser().format_help().split())


def test_a_width_override_of_row_b_says_the_row_is_gone() -> None:
    """`--preset B-dk16 d_model=64` trained d_k 8 (d_model/h), row B's one change (d_k 16) gone,
    and the log still said B-dk16; a row whose d_k is d_model/h (A, C) keeps the rule silently."""
    from types import SimpleNamespace

    def note(name: str, **overrides: object) -> str | None:
        return startup.row_note(SimpleNamespace(preset=name, overrides=overrides), preset(name, **overrides))

    assert note("B-dk16", d_model=64, d_ff=128) == (
        "attnlab train: B-dk16 has d_k=16; with these overrides d_k and d_v are d_model/h = 8: give d_k=16 to keep the row"
    )
    assert preset("B-dk16", d_model=64, d_k=16).d_k == 16 and note("B-dk16", d_model=64, d_k=16) is None
    assert note("B-dk16", p_drop=0.2) is None and note("A-h4", d_model=64) is None
    assert note("C-d256", n_heads=4) is None and note("base", d_model=64) is None
    assert note("B-dk16", d_model=512) is not None  # (d_k 64 again, which is base's d_model/h: still lost)
