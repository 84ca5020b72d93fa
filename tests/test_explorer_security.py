"""What a visitor of a served explorer can reach, from Python and in milliseconds: the path policy
of `attnlab.app.roots` (only directories under the allowed roots, one refusal for everything
else, no server path in what is shown), and the limits the `Store` puts on any request (text
length, beam size), whatever the widgets allow. The same refusals in a real browser are in
tests/test_explorer_browser.py (`test_paths_outside_the_roots_get_one_refusal`).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_notebooks import make_checkpoints

from attnlab.app.explorer.store import MAX_BEAM, MAX_INPUT_CHARS, Store, sentence
from attnlab.app.roots import REFUSAL_SECONDS, CheckpointRoots
from attnlab.errors import CheckpointError
from attnlab.record.trace import AttentionTrace


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """Two roots with a checkpoint-like directory each, a secret directory beside them, and links:
    one out of a root, one from a root to another."""
    base = tmp_path.resolve()
    paths = {
        "root": base / "served" / "runs",
        "other": base / "served" / "more",
        "secret": base / "secret",
    }
    for path in paths.values():
        path.mkdir(parents=True)
    for name in ("run-a", "run-b/checkpoints/step_10"):
        (paths["root"] / name).mkdir(parents=True)
    (paths["root"] / "run-a" / "manifest.json").write_text("{}")
    (paths["root"] / "notes.txt").write_text("a file, not a directory")
    (paths["other"] / "run-c").mkdir()
    (paths["secret"] / "manifest.json").write_text("{}")  # "any directory with a manifest anywhere"
    (paths["root"] / "escape").symlink_to(paths["secret"], target_is_directory=True)
    (paths["root"] / "to-other").symlink_to(paths["other"] / "run-c", target_is_directory=True)
    return paths


@pytest.fixture
def roots(tree: dict[str, Path]) -> CheckpointRoots:
    return CheckpointRoots([tree["root"], tree["other"]])


def refused(roots: CheckpointRoots, request: str) -> tuple[str, float]:
    """The refusal's message and how long it took; fails when the request was not refused."""
    started = time.perf_counter()
    with pytest.raises(CheckpointError) as caught:
        roots.resolve(request)
    return str(caught.value), time.perf_counter() - started


def test_paths_outside_the_roots_get_one_refusal(roots: CheckpointRoots, tree: dict[str, Path]) -> None:
    outside = [
        "/etc",
        "/etc/passwd",
        "/no/such/directory",
        "../..",
        "..",
        "runs/..",  # the parent of a root, by the root's name
        "runs/../../secret",
        "run-a/../../../secret",
        str(tree["root"] / ".." / ".." / "secret"),  # absolute, under a root as typed, outside once normalised
        str(tree["secret"]),  # exists, has a manifest, outside every root
        "escape",  # a symlink in a root that points out of it
        "runs/escape",
        str(tree["root"] / "escape"),
        "runs/notes.txt",  # inside a root, but a file
        "runs/no-such-run",
        "~",
        "",
        "   ",
        "runs/run-a\0/etc",
        "x" * 5000,
    ]
    messages = {}
    for request in outside:
        message, seconds = refused(roots, request)
        messages[request] = message
        assert seconds >= REFUSAL_SECONDS * 0.95, f"{request!r} was refused in {seconds:.3f} s: timing tells it apart"
    assert set(messages.values()) == {roots.refusal}, messages
    assert "\n" not in roots.refusal and "no such directory" in roots.refusal
    assert str(tree["root"]) not in roots.refusal and "runs/, more/" in roots.refusal


def test_paths_under_the_roots_resolve(roots: CheckpointRoots, tree: dict[str, Path]) -> None:
    run_a = tree["root"] / "run-a"
    assert roots.resolve("run-a") == run_a  # relative to each root in turn
    assert roots.resolve("runs/run-a") == run_a  # by the root's name
    assert roots.resolve("runs/run-b/checkpoints/step_10/../../../run-a") == run_a  # `..` that stays inside
    assert roots.resolve(str(run_a)) == run_a  # absolute
    assert roots.resolve(f"  {run_a}/ ") == run_a
    assert roots.resolve("run-c") == tree["other"] / "run-c"  # the second root
    assert roots.resolve("to-other") == tree["other"] / "run-c"  # a link from one root into another
    assert roots.resolve("runs") == tree["root"]  # the root itself (the loader says whether it is a checkpoint)
    assert roots.allows(run_a) and not roots.allows(tree["secret"]) and not roots.allows(tree["root"] / "escape")


def test_outside_paths_are_never_looked_up(roots: CheckpointRoots, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path outside the roots as written is refused before any file system call: no existence
    check, no symlink resolution, so nothing about it can leak (not even through timing)."""
    seen: list[str] = []
    for name in ("realpath", "isdir", "exists", "isfile"):
        real = getattr(os.path, name)
        monkeypatch.setattr(
            os.path, name, lambda path, *a, _real=real, **k: seen.append(str(path)) or _real(path, *a, **k)
        )
    for request in ("/etc", "/etc/passwd", "/no/such/directory", "../..", "runs/../.."):
        refused(roots, request)
    assert seen == []


def test_a_root_that_is_a_symlink_and_relative_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = tmp_path / "real-runs"
    (real / "run").mkdir(parents=True)
    (tmp_path / "linked").symlink_to(real, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    roots = CheckpointRoots(["linked", "linked", "missing-root"])  # duplicates and missing roots are dropped
    assert [r.name for r in roots.roots] == ["linked"]
    assert roots.resolve("linked/run") == (real / "run").resolve() == roots.resolve(str(tmp_path / "linked" / "run"))
    assert roots.display(real / "run") == "linked/run" == roots.display(tmp_path / "linked" / "run")
    refused(roots, "missing-root")
    for side in "ab":
        (tmp_path / side / "runs").mkdir(parents=True)
    twins = CheckpointRoots([tmp_path / "a" / "runs", tmp_path / "b" / "runs"])
    assert [r.name for r in twins.roots] == ["runs", "runs-2"]  # same name twice: told apart without a path


def test_names_and_messages_never_show_server_paths(roots: CheckpointRoots, tree: dict[str, Path]) -> None:
    run_a = tree["root"] / "run-a"
    assert roots.display(run_a) == "runs/run-a" and roots.display(tree["other"]) == "more"
    assert roots.display(tree["secret"] / "x") == "x"  # outside every root: its last component only
    message = f"{run_a}/model.safetensors is missing; see {tree['secret']}/log.txt and /home/someone/.ssh"
    scrubbed = roots.scrub(message)
    assert scrubbed == "runs/run-a/model.safetensors is missing; see log.txt and .ssh"
    assert roots.scrub(f"{run_a}: damaged", {str(run_a): "my run"}) == "my run: damaged"
    assert roots.scrub("beam 4/8, α 0.6; ratio 1/2") == "beam 4/8, α 0.6; ratio 1/2"  # not paths


# -- the Store: the policy and the limits, as any request reaches them ---------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("security")
    paths = make_checkpoints(base / "served")
    (base / "elsewhere").mkdir()
    os.symlink(paths["translate"], base / "elsewhere" / "copy")  # a checkpoint outside the root, by a link
    return {**paths, "root": base / "served", "outside": base / "elsewhere" / "copy"}


@pytest.fixture
def store(models: dict[str, Path]) -> Iterator[Store]:
    store = Store(roots=CheckpointRoots([models["root"]]))
    assert store.open_request("served/tiny-translator"), store.error
    yield store


def test_store_opens_only_under_its_roots(store: Store, models: dict[str, Path]) -> None:
    model = store.model
    assert store.checkpoint_name == "served/tiny-translator" and store.checkpoint == str(models["translate"].resolve())
    for request in ("/etc", "/etc/passwd", "../..", "/no/such/directory", str(models["outside"])):
        assert not store.open_request(request)
        assert store.error == sentence(store.roots.refusal) and store.model is model
    assert store.open_request(str(models["parse"])) and store.model.task == "parse"
    assert store.checkpoint_name == "served/tiny-parser" and not store.error


def test_a_checkpoint_under_a_root_serves_only_files_under_the_roots(
    store: Store, models: dict[str, Path], tmp_path: Path
) -> None:
    """A folder inside a root whose files are links to a model elsewhere served that model (and a
    link to /etc/shadow told its size); a FIFO config.json hung the whole server."""
    hidden = tmp_path / "hidden"
    shutil.copytree(models["translate"], hidden)
    linked, fifo = models["root"] / "linked", models["root"] / "fifo"
    linked.mkdir(exist_ok=True)
    for file in hidden.iterdir():
        (linked / file.name).unlink(missing_ok=True)
        os.symlink(file, linked / file.name)
    shutil.copytree(models["translate"], fifo, dirs_exist_ok=True)
    (fifo / "config.json").unlink()
    os.mkfifo(fifo / "config.json")
    model = store.model
    try:
        for request in ("served/linked", "served/fifo"):
            assert not store.open_request(request)
            assert store.error == sentence(store.roots.refusal) and store.model is model
        assert not store.roots.holds_whole(linked) and store.roots.holds_whole(models["translate"])
    finally:  # the module's other tests list this root
        shutil.rmtree(linked)
        shutil.rmtree(fifo)


def test_probes_above_a_root_and_special_files_are_not_read(tmp_path: Path) -> None:
    """The timeline read `probes/` two levels above a checkpoint, outside every root; a FIFO
    config.json blocked the picker's scan, and /dev/zero as alignment.json exhausted memory."""
    from attnlab.app.checkpoints import alignment_snapshots, describe, probe_snapshots

    root, checkpoint = tmp_path / "served", tmp_path / "served" / "plain"
    checkpoint.mkdir(parents=True)
    for probes in (tmp_path / "probes" / "step_5", checkpoint / "probes" / "step_6"):
        probes.mkdir(parents=True)
        (probes / "probe_0.trace").write_bytes(b"x")
    roots = CheckpointRoots([root])
    assert [step for step, _ in probe_snapshots(root / "z", roots.allows)] == []  # served/z's ../../probes: outside
    assert [step for step, _ in probe_snapshots(checkpoint / "step_1", roots.allows)] == [6]
    assert [step for step, _ in probe_snapshots(tmp_path / "served" / "z", lambda _: True)] == [
        5
    ]  # (the unserved default)
    with open(checkpoint / "probes" / "step_6" / "probe_1.trace", "wb") as huge:  # sparse: read whole, 40 GiB
        huge.truncate(40 << 30)
    assert [[f.name for f in files] for _, files in probe_snapshots(checkpoint, roots.allows)] == [["probe_0.trace"]]
    os.mkfifo(checkpoint / "config.json")
    os.symlink("/dev/zero", checkpoint / "probes" / "step_6" / "alignment.json")
    started = time.perf_counter()
    assert describe(checkpoint) == "" and alignment_snapshots(checkpoint, roots.allows) == {}
    assert time.perf_counter() - started < 5


def test_an_alignment_table_a_kill_cut_short_leaves_the_timeline_drawn(tmp_path: Path) -> None:
    """A run killed while it wrote `probes/step_N/alignment.json` (written in place) left it cut
    short, and opening the Training timeline of that run in the explorer was a JSONDecodeError
    (a KeyError for a table of other fields): the tab stayed empty, the log held a traceback.
    Such a table is not read; the other steps' are."""
    import json

    from attnlab.app.checkpoints import alignment_snapshots

    row = {"reading": "head L0 H1", "aer": 0.25, "method": "head", "layer": 0, "head": 1}
    whole = json.dumps({"set": "enfr", "pairs": 3, "rows": [row]})
    for step, text in {10: whole, 20: whole[:40], 30: '{"rows": [{"aer": 0.1}]}', 40: "[]", 50: whole}.items():
        (tmp_path / "probes" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "probes" / f"step_{step}" / "alignment.json").write_text(text)
    assert {step: t["rows"][0]["aer"] for step, t in alignment_snapshots(tmp_path).items()} == {10: 0.25, 50: 0.25}


def test_store_errors_name_the_checkpoint_not_the_server_path(store: Store, models: dict[str, Path]) -> None:
    empty = models["root"] / "empty"
    empty.mkdir(exist_ok=True)
    assert not store.open_request("served/empty")
    assert "not an attnlab checkpoint" in store.error and store.error.startswith("served/empty: ")  # as named
    assert str(models["root"]) not in store.error and "/" + models["root"].parent.name not in store.error
    assert not store.open(empty, "picked name")
    assert store.error.startswith("picked name: not an attnlab checkpoint")  # a name keeps its case


def test_exports_and_results_carry_no_server_path(store: Store, models: dict[str, Path]) -> None:
    store.text, store.reference = "the dog runs .", "der hund läuft ."
    assert store.submit(), store.error
    for trace in (store.trace, store.result.trace, store.scored.trace):
        assert trace.model["checkpoint"] == "served/tiny-translator"
    saved = store.trace.save(models["root"].parent / "export.trace")
    assert str(models["root"].parent).encode() not in saved.read_bytes()
    assert AttentionTrace.load(saved).model["checkpoint"] == "served/tiny-translator"
    assert store.model.info["checkpoint"] == store.model.path == str(models["translate"].resolve())  # untouched


def test_decoding_past_the_time_limit_is_one_line_and_keeps_the_views(store: Store) -> None:
    """A long text at a wide beam decoded for minutes and held up every session of the server."""
    store.text = "the dog runs ."
    assert store.submit(), store.error
    result, run = store.result, store.run
    store.time_limit = 1e-9
    store.text = "the cat sleeps ."
    assert not store.submit()
    assert store.error == "Decoding stopped after 1e-09 s, its time limit: try a shorter text or a smaller beam."
    assert store.result is result and store.run == run  # the last good run stays on screen
    store.time_limit = 0.0  # none
    assert store.submit() and not store.error and store.run == run + 1


def test_beam_is_capped_in_the_store(store: Store) -> None:
    store.text = "the dog runs ."
    # a crafted 1e300 is a whole number: cut like 10,000, and named in three digits, not 301
    for asked, said, used in ((10_000, "10,000", MAX_BEAM), (0, "0", 1), (-5, "-5", 1), (10**300, "1e+300", MAX_BEAM)):
        store.beam = asked
        assert store.submit(), store.error
        # at most `used`: the search stops early once no live hypothesis can win (search.py)
        assert 1 <= len(store.result.hypotheses) <= used and store.beam == used
        assert any(f"Beam size {said} is outside 1–{MAX_BEAM}" in n for n in store.notices), store.notices
        assert all(len(n) < 200 for n in store.notices), store.notices
    store.beam = 3
    assert store.submit() and store.notices == [] and 1 <= len(store.result.hypotheses) <= 3 and store.beam == 3
    for alpha in (math.nan, 1e9, -1.0):  # α's bounds refuse what a crafted request sets (NaN included)
        with pytest.raises(ValueError):
            store.alpha = alpha
    assert store.alpha == 0.6


def test_a_crafted_alpha_or_beam_that_is_not_finite_never_reaches_the_decoder(
    models: dict[str, Path], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What a crafted websocket message does to the α and beam boxes (the page's own widgets
    cannot send NaN or ±inf), as Panel applies a browser's change to them: NaN in the α box is an
    emptied box (the task's α); ±inf, or 1e9 for α, is one notice, the last good value stays and
    the box shows it again; the decode that follows uses a finite α. Each was param's ValueError,
    which Panel logged as "Callback failed" with a traceback while the box kept showing it."""
    from bokeh.document import Document

    from attnlab.app.explorer import Explorer

    monkeypatch.setattr(logging.getLogger("panel"), "propagate", True)  # Panel's log, where caplog reads it
    explorer = Explorer({"tiny": str(models["translate"])}, CheckpointRoots([models["root"]]))
    explorer.open_listed("tiny")
    store, used = explorer.store, []
    translate = store.model.translate  # shared by the server's sessions: restored by monkeypatch
    monkeypatch.setattr(
        store.model, "translate", lambda *args, **kw: used.append(kw["alpha"]) or translate(*args, **kw)
    )
    store.alpha = 0.9
    shown = {box: box.get_root(Document()) for box in (explorer.alpha_input, explorer.beam_input)}  # the browser's
    cases = [
        (explorer.alpha_input, crafted, "α = {} is not a number from 0 to 5: α stays 0.9.")
        for crafted in (math.inf, -math.inf, 1e9)
    ]
    cases += [
        (explorer.beam_input, crafted, "A beam size of {} is not a whole number: the beam stays 4.")
        for crafted in (math.nan, math.inf, -math.inf, 2.5)
    ]
    for box, crafted, said in cases:
        shown[box].value = crafted
        box._process_events({"value": crafted, "value_throttled": crafted})  # raised ValueError
        assert (store.alpha, store.beam, box.value) == (0.9, 4, shown[box].value) and box.value in (0.9, 4)
        assert store.notices[-1] == said.format(crafted) and store.error == ""
        assert sum("is not" in n for n in store.notices) == 1  # the last refusal only
    assert "Callback failed" not in caplog.text and "Traceback" not in caplog.text
    explorer.beam_input._process_events({"value": 3.0})  # a JSON 3.0 is the whole number 3
    assert store.beam == 3
    store.text = "the dog runs ."
    assert store.submit() and used == [0.9] and not any("is not" in n for n in store.notices)
    explorer.alpha_input._process_events({"value": math.nan})
    assert store.alpha is None and store.submit() and used == [0.9, 0.6]
    explorer.alpha_input._process_events({"value": math.inf})
    assert store.alpha is None and store.notices[-1] == "α = inf is not a number from 0 to 5: α stays 0.6."


def test_text_and_reference_are_capped_in_the_store(store: Store) -> None:
    store.text, store.reference = "the dog runs . " * 14_000, "der hund . " * 20_000  # 210,000 and 220,000 characters
    started = time.perf_counter()
    assert store.submit(), store.error
    seconds = time.perf_counter() - started
    assert store.result.source == store.text[:MAX_INPUT_CHARS] and store.result.truncated
    assert store.scored.source == store.text[:MAX_INPUT_CHARS]
    assert store.trace.meta["text"] == store.text[:MAX_INPUT_CHARS]
    assert any("The input has 210,000 characters; this server reads only the first 20,000" in n for n in store.notices)
    assert any("The reference has 220,000 characters" in n for n in store.notices)
    assert any("truncated" in n for n in store.notices)
    most = store.model.config.max_len - 1  # the reference's log P covers this many pieces: said (it was not)
    assert any(n.startswith("The reference was truncated") and f"the first {most} only" in n for n in store.notices)
    print(f"210,000-character request: {seconds:.2f} s")


def test_a_byte_order_mark_is_not_translated(store: Store) -> None:
    """Pasted with the text, U+FEFF was read as three byte pieces and translated (the command
    line's reader drops it)."""
    store.text = "\ufeffthe dog runs ."
    assert store.submit(), store.error
    assert store.result.src_tokens == store.model.translate("the dog runs .").src_tokens


def test_an_emptied_beam_or_alpha_box_means_the_tasks_value(store: Store) -> None:
    """Emptying the beam or α box sent None: a ValueError traceback on the server, and the box
    snapped back without a word. Now it decodes with the model's task's setting (4 and 0.6)."""
    store.text = "the dog runs ."
    store.beam, store.alpha = None, None
    assert store.beam_size == 4 and store.submit(), store.error
    assert store.result.text == store.model.translate("the dog runs .", beam=4, alpha=0.6).text


def test_sessions_do_not_share_state(models: dict[str, Path]) -> None:
    roots = CheckpointRoots([models["root"]])
    first, second = Store(roots=roots), Store(roots=roots)
    assert first.open_request("tiny-translator") and second.open_request("tiny-translator")
    assert first.model is second.model  # the weights are shared, read only
    first.text, second.text = "the dog runs .", "a girl sits ."
    first.beam = 10_000
    assert first.submit() and second.submit()
    assert first.trace.meta["text"] == "the dog runs ." and second.trace.meta["text"] == "a girl sits ."
    assert second.beam == 4 and second.notices == [] and first.notices
    assert not second.open_request("/etc") and not first.error


# -- the picker's names: what a config says, never more, in every language -----------------------------------
def test_picker_names_show_only_codes_corpora_and_catalogue_words(tmp_path: Path) -> None:
    """`describe` reads a config.json anyone may have written: a name shows the catalogue's words
    (in the page's language), language codes and known corpora, and nothing else the config holds."""
    import json

    from attnlab.app.checkpoints import describe, find_checkpoints
    from attnlab.app.i18n import LANGUAGES, text

    hostile = "/home/someone/.ssh/id_rsa"
    configs = {
        "a-path-as-language": {"task": "translate", "src_lang": hostile, "tgt_lang": "de"},
        "markup-as-language": {"task": "translate", "src_lang": "en", "tgt_lang": "<img src=x>"},
        "a-path-as-corpus": {"task": "parse", "src_lang": "en", "corpus": hostile},
        "unknown-language": {"task": "translate", "src_lang": "pt", "tgt_lang": "en", "corpus": "tatoeba"},
        "not-a-task": {"task": hostile, "src_lang": "en", "tgt_lang": "de"},
    }
    for name, data in configs.items():
        (tmp_path / "bundled" / name).mkdir(parents=True)
        (tmp_path / "bundled" / name / "config.json").write_text(json.dumps({"model": {}, "meta": {"data": data}}))
        (tmp_path / "bundled" / name / "manifest.json").write_text("{}")
    big = tmp_path / "bundled" / "huge"
    big.mkdir()
    (big / "manifest.json").write_text("{}")
    meta = {"data": {"task": "translate", "src_lang": "en", "tgt_lang": "de"}, "padding": "x" * (1 << 20)}
    (big / "config.json").write_text(json.dumps({"model": {}, "meta": meta}))  # over 1 MiB: not read
    twins = [tmp_path / "one" / "unknown-language", tmp_path / "two" / "unknown-language"]  # copies: one name
    for twin in twins:
        shutil.copytree(tmp_path / "bundled" / "unknown-language", twin)
    for lang in LANGUAGES:
        shown = {
            "a-path-as-corpus": text("checkpoint.parser", lang, language=text("lang.en", lang)),
            "unknown-language": text("checkpoint.translator", lang, src="PT", tgt=text("lang.en.code", lang)),
        }
        assert {name: describe(tmp_path / "bundled" / name, lang) for name in [*configs, "huge"]} == {
            name: shown.get(name, "") for name in [*configs, "huge"]
        }
        names = list(find_checkpoints([tmp_path / "x" / "huge", *twins], bundled=tmp_path / "bundled", lang=lang))
        assert len(names) == len(set(names)) == 9 and not any("ssh" in n or "<" in n or "/" in n for n in names)
        twin = f"{shown['unknown-language']} · unknown-language"
        assert [n for n in names if n.startswith(twin)] == [
            twin,
            f"{twin} (2)",
            f"{twin} (3)",
        ]  # unique in every language


def test_a_root_holding_a_directory_the_server_cannot_read_lists_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `--checkpoint-root` holding a directory another user keeps to themselves (mode 0700)
    made the picker's scan raise PermissionError (`Path.is_file`, Python 3.11), so every session
    of the server failed to build its page. It is left out; the others are listed (a run whose
    `checkpoints/` is theirs without a description: reading its newest config raised too)."""
    from attnlab.app.checkpoints import find_checkpoints

    root = tmp_path / "shared"
    for name in ("mine", "theirs"):
        (root / name).mkdir(parents=True)
        (root / name / "manifest.json").write_text("{}")
    (root / "run" / "checkpoints").mkdir(parents=True)  # a run whose checkpoints/ is theirs: not described
    another_users(monkeypatch, root / "theirs", root / "run" / "checkpoints")
    found = find_checkpoints(roots=[root, tmp_path / "gone"], bundled=tmp_path / "none")
    assert list(found) == ["shared/mine", "shared/run"]


def test_probes_the_server_cannot_read_are_left_out_and_the_timeline_opens(
    models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's `probes/`, or one `probes/step_N/`, that another user keeps to themselves (mode
    0700) made the timeline's scan raise PermissionError: the Training tab stayed empty and the
    log held the traceback. They are left out, as the picker leaves such runs out; a probe trace
    the server cannot read (mode 0600) is one line in the error box."""
    from attnlab.app.checkpoints import open_model
    from attnlab.app.explorer import Explorer

    run = tmp_path / "runs" / "tiny"
    shutil.copytree(models["translate"], run)
    trace = open_model(run).score("the dog runs .", "der hund läuft .", record=True).trace
    for step in (10, 20, 30):
        trace.save(run / "probes" / f"step_{step}" / "probe_0.trace")

    def training_tab(*kept: Path) -> Explorer:
        with monkeypatch.context() as patch:
            another_users(patch, *kept)
            explorer = Explorer({"tiny": str(run)}, CheckpointRoots([tmp_path / "runs"]))
            explorer.open_listed("tiny")
            explorer.tabs.active = 3  # the timeline finds its snapshots when its tab opens
        return explorer

    assert sorted(training_tab().timeline._snapshots) == [10, 20, 30]
    explorer = training_tab(run / "probes" / "step_20")
    assert sorted(explorer.timeline._snapshots) == [10, 30] and not explorer.store.error
    explorer = training_tab(run / "probes")
    assert explorer.timeline._snapshots == {} and "probes/step_N/" in explorer.timeline.note.object
    assert not explorer.store.error
    explorer = training_tab(run / "probes" / "step_30" / "probe_0.trace")
    said = "runs/tiny/probes/step_30/probe_0.trace: cannot read the trace (Permission denied)."
    assert set(explorer.store.errors.values()) == {said} and explorer.error.visible  # while its tab is open
    assert explorer.error.object.count("Permission denied") == 1  # (its snapshots' and its map's error)


def another_users(monkeypatch: pytest.MonkeyPatch, *kept: Path) -> None:
    """Make each of `kept` another user's, as mode 0700 (a directory) or 0600 (a file) keeps it
    from the server: it is seen, but not listed nor read, and nothing in it is looked at. The
    tests run as root, who reads everything, so it is simulated."""
    stat, listdir, scandir, opened = Path.stat, os.listdir, os.scandir, Path.open

    def hidden(path: object, itself: bool) -> bool:
        where = Path(path) if isinstance(path, str | os.PathLike) else None
        return where is not None and any(p in where.parents or (itself and p == where) for p in kept)

    def denied(path: object) -> PermissionError:
        return PermissionError(13, "Permission denied", str(path))

    def checked_stat(path: Path, *, follow_symlinks: bool = True) -> os.stat_result:
        if hidden(path, itself=False):
            raise denied(path)
        return stat(path, follow_symlinks=follow_symlinks)

    def checked(call: Callable) -> Callable:
        def call_if_allowed(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            if hidden(path, itself=True):
                raise denied(path)
            return call(path, *args, **kwargs)

        return call_if_allowed

    monkeypatch.setattr(Path, "stat", checked_stat)
    monkeypatch.setattr(Path, "open", checked(opened))
    monkeypatch.setattr(os, "listdir", checked(listdir))
    monkeypatch.setattr(os, "scandir", checked(scandir))


def test_the_component_route_reads_only_modules_the_server_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Panel's `/components/<module>/...` imported any installed module a request named, so a
    visitor could run any package's top-level code on the server."""
    from panel.io.server import ComponentResourceHandler
    from tornado.web import HTTPError

    from attnlab.app.serve import HARDEN, close_component_route, serve_command

    (tmp_path / "sideeffect_probe.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.ran').touch()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    close_component_route()
    close_component_route()  # once is enough: a second call does not wrap the guard again
    parse = ComponentResourceHandler.parse_url_path
    with pytest.raises(HTTPError, match="Module not found"):
        parse(None, "sideeffect_probe/Thing/__css__/a.css")
    assert "sideeffect_probe" not in sys.modules and not (tmp_path / "sideeffect_probe.ran").exists()
    with pytest.raises(HTTPError, match="Component not found"):  # an imported module goes on to Panel's own checks
        parse(None, "panel/NoSuchThing/__css__/a.css")
    command = serve_command([], 5006, "127.0.0.1")
    assert command[command.index("--setup") + 1] == str(HARDEN) and HARDEN.is_file()


def test_a_message_bokeh_refuses_is_one_line_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """A crafted message Bokeh's server cannot apply (None for a text box's value) fails in
    Bokeh's own handler, before any of the app's code: it logged the whole message and a
    traceback. Through Bokeh's real `ProtocolHandler.handle`, with the handler that raised."""
    import asyncio

    from bokeh.server.protocol_handler import ProtocolHandler

    from attnlab.app.serve import one_line_refusals

    class Message:
        msgtype = "PATCH-DOC"

        def __repr__(self) -> str:
            return "Message(" + "x" * 100_000 + ")"  # a message is up to MAX_MESSAGE_BYTES

    class Connection:
        def error(self, message: Message, text: str) -> str:
            return f"error reply: {text}"

    async def refuse(message: Message, connection: Connection) -> None:
        raise ValueError("failed to validate TextInput(id='p1').value: expected str, got None")

    handler = ProtocolHandler()
    handler._handlers["PATCH-DOC"] = refuse
    one_line_refusals()
    one_line_refusals()  # once is enough: a second call adds no second filter
    with caplog.at_level(logging.ERROR, logger="bokeh.server.protocol_handler"):
        reply = asyncio.run(handler.handle(Message(), Connection()))
    assert reply.startswith("error reply: ValueError(")  # Bokeh still answers the browser
    (record,) = caplog.records
    line = record.getMessage()
    assert line.startswith("refused a browser's message: ValueError(") and "expected str, got None" in line
    assert len(line) < 300 and "\n" not in line and record.exc_info is None and not caplog.text.count("Traceback")


def test_a_page_closed_during_an_update_is_one_line_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """A visitor closing a tab while the server writes to it: asyncio logged "Task exception was
    never retrieved" and Tornado's traceback for each. Through asyncio's own handler."""
    import asyncio

    from tornado.websocket import WebSocketClosedError

    from attnlab.app.serve import one_line_closed_pages

    one_line_closed_pages()
    one_line_closed_pages()  # once is enough
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            try:
                raise WebSocketClosedError()
            except WebSocketClosedError as error:
                loop.default_exception_handler({"message": "Task exception was never retrieved", "exception": error})
            loop.default_exception_handler({"message": "another", "exception": ValueError("kept")})
    finally:
        loop.close()
    closed, other = caplog.records
    assert closed.getMessage() == "a page was closed while the explorer updated it (WebSocketClosedError)"
    assert closed.exc_info is None and other.exc_info is not None  # any other error keeps its traceback


def test_a_page_closed_before_its_session_opened_is_one_line_and_a_burst_of_failed_sends_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A tab closed while the server decoded a long sentence: Tornado logged "Uncaught exception
    GET /explorer/ws" and a traceback ending in Bokeh's assertion that the connection had its
    session (3 of 5 tries), after forty lines of Panel's "Failed sending message"."""
    from bokeh.server.connection import ServerConnection

    from attnlab.app.serve import one_line_closed_pages

    one_line_closed_pages()
    connection = object.__new__(ServerConnection)  # as Bokeh's on_close finds it: no session yet
    connection._session = None
    with caplog.at_level(logging.WARNING):
        for error in ("session", "assert"):
            try:
                if error == "session":
                    connection.session  # noqa: B018
                else:
                    raise AssertionError("another")
            except AssertionError:
                logging.getLogger("tornado.application").error("Uncaught exception GET /explorer/ws", exc_info=True)
        for _ in range(40):
            logging.getLogger("panel.io.document").warning("Failed sending message as connection was closed")
    closed, other, failed = caplog.records
    assert closed.getMessage() == "a page was closed while the explorer updated it (AssertionError)"
    assert closed.exc_info is None and other.exc_info is not None  # any other assertion keeps its traceback
    assert failed.getMessage() == "Failed sending message as connection was closed"
