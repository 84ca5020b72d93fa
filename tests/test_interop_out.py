"""Where `attnlab export ctranslate2` and `attnlab import marian` write: never over the working
directory or the model being read, never inside a model directory, `--force` replacing only an
export's own files, an old export kept whole when the new one cannot be renamed in; and the
checkpoint files a valid model at an unusual path is read from, said in safetensors' own words."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from marian_models import make_marian

import attnlab
from attnlab import publish as model_publish
from attnlab.cli import main
from attnlab.errors import CheckpointError
from attnlab.model.checkpoint import save_checkpoint
from attnlab.model.config import preset
from attnlab.model.transformer import Transformer
from attnlab.publish import publish

ROOT = Path(__file__).resolve().parents[1]
BUNDLED_SPM = ROOT / "checkpoints" / "multi30k-en-de" / "spm.model"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny translator over the bundled vocabulary (exports in a second)."""
    if not BUNDLED_SPM.is_file():
        pytest.skip("the bundled translator's spm.model is not here")
    model = Transformer(preset("tiny", vocab_size=8000))
    return save_checkpoint(tmp_path_factory.mktemp("tiny") / "ck", model, BUNDLED_SPM, meta={"task": "translate"})


def export(checkpoint: Path, out: str | Path, *force: str) -> list[str]:
    return ["export", "ctranslate2", str(checkpoint), "--out", str(out), *force]


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"attnlab {argv[0]}: error: ") and "\n" not in error, error
    return error


def contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def test_export_never_replaces_the_working_directory_or_the_model_it_reads(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`export CK --out . --force` in an export's directory deleted everything there, then failed
    ("could not write ."): the new export was being renamed over the working directory."""
    pytest.importorskip("ctranslate2")
    ct2 = tmp_path / "ct2"
    assert main(export(tiny, ct2)) == 0
    before = contents(ct2)
    monkeypatch.chdir(ct2)
    for out in (".", "..", str(ct2)):
        error = refusal(capsys, export(tiny, out, "--force"))
        assert error.endswith(f"--out {out} is or holds the current directory; name a new directory"), error
    assert contents(ct2) == before and sorted(os.listdir(tmp_path)) == ["ct2"]
    monkeypatch.chdir(tmp_path)
    error = refusal(capsys, export(tiny, tiny.parent, "--force"))
    assert error.endswith(f"--out {tiny.parent} is or holds {tiny}, the model being read; name a new directory")


def test_export_and_import_refuse_an_out_inside_a_model_directory(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As `evaluate`, `align` and `record` refuse: `export CK --out CK/ct2` wrote a CTranslate2
    model among the checkpoint's files, and `import` a checkpoint inside another."""
    pytest.importorskip("ctranslate2")
    before = sorted(os.listdir(tiny))
    error = refusal(capsys, export(tiny, tiny / "ct2"))
    assert error.endswith(f"--out {tiny / 'ct2'} is inside the model directory {tiny}; name a directory elsewhere")
    marian = make_marian(tmp_path / "marian", "gelu")
    capsys.readouterr()  # transformers' progress bar while saving
    error = refusal(capsys, ["import", "marian", str(marian), "--out", str(tiny / "imported")])
    assert error.endswith(f"is inside the model directory {tiny}; name a directory elsewhere")
    error = refusal(capsys, ["import", "marian", str(marian), "--out", str(marian), "--force"])
    assert error.endswith(f"--out {marian} is or holds {marian}, the model being read; name a new directory")
    assert sorted(os.listdir(tiny)) == before


def test_export_force_replaces_only_what_an_export_writes(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory with a model.bin in it was replaced whole by `--force`, the user's files too."""
    pytest.importorskip("ctranslate2")
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("model.bin", "config.json", "shared_vocabulary.json", "notes.txt"):
        (mine / name).write_text("keep")
    error = refusal(capsys, export(tiny, mine, "--force"))
    assert error.endswith(
        f"{mine} is not a CTranslate2 model; refusing to replace it (it holds 'notes.txt', which no export writes:"
        " name a new directory)"
    )
    (mine / "notes.txt").unlink()
    (mine / "config.json").unlink()
    assert "(an export's files are not all there: name a new directory)" in refusal(
        capsys, export(tiny, mine, "--force")
    )
    assert contents(mine) == {"model.bin": b"keep", "shared_vocabulary.json": b"keep"}
    assert main(export(tiny, tmp_path / "ct2")) == 0 and main(export(tiny, tmp_path / "ct2", "--force")) == 0
    assert sorted(os.listdir(tmp_path / "ct2")) == ["config.json", "model.bin", "shared_vocabulary.json"]


@pytest.mark.parametrize("swapped", [True, False], ids=["swapped in one step", "renamed aside"])
def test_an_export_that_cannot_be_renamed_in_keeps_the_old_one(
    swapped: bool, tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old export was deleted before the new one was renamed in: a failure between the two
    lost both. Swapped with it in one step (Linux) or renamed aside first (elsewhere), a failure
    of the rename that puts the new one in place keeps the old one."""
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    assert main(export(tiny, out)) == 0
    before = contents(out)
    real, failed = os.replace, []

    def replace(source: str | Path, target: str | Path) -> None:
        if Path(target) == out and Path(source).name.startswith(".ct2.tmp-") and not failed:
            failed.append(source)  # the new export's rename, once: putting the old one back works
            raise OSError(28, "No space left on device")
        real(source, target)

    def exchange(first: Path, second: Path) -> bool:
        if swapped:  # the one-step swap fails as the rename would
            replace(first, second)
        return False

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(model_publish, "exchanged", exchange)
    error = refusal(capsys, export(tiny, out, "--force"))
    assert failed and error.endswith(f"could not write {out} (No space left on device)")
    assert contents(out) == before and sorted(os.listdir(tmp_path)) == ["ct2"]


def test_publish_leaves_no_aside_directory_when_the_rename_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`import marian M --out . --force` inside a checkpoint left an empty `..tmp-XXXX` there: the
    directory made to set the old one aside stayed when renaming the working directory failed."""
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "model.safetensors").write_text("old")
    (tmp_path / "new").mkdir()
    monkeypatch.chdir(tmp_path / "ck")
    with pytest.raises(OSError):
        publish(tmp_path / "new", Path("."))
    assert os.listdir(".") == ["model.safetensors"] and (tmp_path / "new").is_dir()


def test_publish_refuses_a_symbolic_link_in_the_place_of_the_directory(tmp_path: Path) -> None:
    """`import marian M --out LINK --force`, LINK a link to a checkpoint, said "(Is a directory)";
    swapped in one step, the link itself was replaced, its target left as it was."""
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "model.safetensors").write_text("old")
    (tmp_path / "link").symlink_to(tmp_path / "ck")
    (tmp_path / "new").mkdir()
    with pytest.raises(OSError, match="link is a symbolic link; name the directory it points to"):
        publish(tmp_path / "new", tmp_path / "link")
    assert (tmp_path / "link").is_symlink() and os.listdir(tmp_path / "link") == ["model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["ck", "link", "new"]


def test_a_checkpoint_at_a_path_that_is_not_utf8_says_why_it_cannot_be_read(tiny: Path, tmp_path: Path) -> None:
    """A valid checkpoint in a directory named with a byte that is not UTF-8 was "not a
    safetensors file (SafetensorError)": safetensors cannot open such a path, and said so."""
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/ck_\xff"))
    save_checkpoint(tmp_path / "ck", Transformer(preset("tiny", vocab_size=8000)), BUNDLED_SPM)
    os.rename(tmp_path / "ck", odd)
    with pytest.raises(CheckpointError) as error:
        attnlab.load(odd)
    said = str(error.value)
    assert said.startswith(f"{odd / 'model.safetensors'}: cannot be opened (Path ") and "\n" not in said
    assert said.endswith("is not valid UTF-8); refusing to load it"), said
