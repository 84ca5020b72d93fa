"""Corpus-scale head profiles (`attnlab heads profile|query`, `attnlab.decode.profile`): every row
is the head statistics of one sentence, checked against `head_stats` on the same traces; DuckDB
answers SQL over the file from the CLI and from Python; gold alignments add each cross head's
AER as `attnlab.decode.alignment` computes it; the explorer opens profiles under its roots only.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnlab.cli import main
from attnlab.decode.aer import aer
from attnlab.decode.alignment import align_lines, piece_words, word_links
from attnlab.decode.loading import load
from attnlab.decode.pharaoh import read_pharaoh
from attnlab.decode.profile import profile, query, read_profile, write_profile
from attnlab.decode.readings import reading
from attnlab.errors import AttnlabError, CheckpointError, ConfigError, DataError, ModelInputError
from attnlab.record.stats import COLUMNS, PATTERNS, head_pattern, head_stats, sentence_stats
from attnlab.record.trace import AttentionTrace

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "checkpoints" / "multi30k-en-de"
SOURCES = [
    "A dog runs in the park.",
    "Two men are working on a roof.",
    "A little girl in a pink dress is climbing into a wooden playhouse.",
]
REFERENCES = [
    "Ein Hund rennt im Park.",
    "Zwei Männer arbeiten auf einem Dach.",
    "Ein kleines Mädchen in einem rosa Kleid klettert in ein Spielhaus aus Holz.",
]


@pytest.fixture(scope="module")
def model():
    if not (BUNDLED / "manifest.json").is_file():
        pytest.skip("the bundled checkpoints/multi30k-en-de is not here")
    return load(BUNDLED)


def by_head(table: pa.Table, sentence: int) -> dict[tuple[str, int, int], dict]:
    return {(r["kind"], r["layer"], r["head"]): r for r in table.to_pylist() if r["sentence"] == sentence}


def check_against_head_stats(table: pa.Table, traces: list[AttentionTrace]) -> None:
    n_heads = traces[0].n_heads
    assert table.num_rows == len(traces) * sum(len(t) for t in traces[0].layers.values()) * n_heads
    for index, trace in enumerate(traces):
        rows = by_head(table, index)
        for expected in head_stats(trace):
            row = rows[(expected["kind"], expected["layer"], expected["head"])]
            assert row["queries"] == expected["rows"]
            for name in COLUMNS:
                assert row[name] == pytest.approx(expected[name], abs=1e-5), (index, name)
            assert row["pattern"] == head_pattern(expected)[0]  # named as the Heads tab names it


# -- the statistics --------------------------------------------------------------------------------------
def test_diagonal_and_sentence_stats_on_known_patterns() -> None:
    eye = np.eye(4, dtype=np.float32)[None]
    far = np.zeros((1, 4, 4), np.float32)
    far[0, :, 3] = 1  # every query on the last key: on the diagonal only near the end
    trace = AttentionTrace(["a", "b", "c", "</s>"], [], {"encoder": [np.concatenate([eye, far])]})
    rows = {r["head"]: r for r in sentence_stats(trace)}
    assert rows[0]["diagonal"] == pytest.approx(1) and rows[1]["diagonal"] == pytest.approx(0.5)
    assert rows[1]["eos"] == pytest.approx(1) and rows[0]["queries"] == rows[0]["keys"] == 4
    wide = AttentionTrace(
        ["a", "b", "c", "d", "e", "</s>"], ["x", "</s>"], {"cross": [np.zeros((1, 2, 6), np.float32)]}
    )
    wide.maps["cross"][0][0, 0, 0] = wide.maps["cross"][0][0, 1, 5] = 1  # corner to corner: the scaled diagonal
    assert sentence_stats(wide)[0]["diagonal"] == pytest.approx(1)


def test_head_stats_are_the_row_weighted_means_of_sentence_stats() -> None:
    rng = np.random.default_rng(0)
    traces = []
    for n in (3, 7):
        weights = rng.random((2, n, n)).astype(np.float32)
        traces.append(
            AttentionTrace(
                [f"t{i}" for i in range(n - 1)] + ["</s>"], [], {"encoder": [weights / weights.sum(-1, keepdims=True)]}
            )
        )
    pooled = {r["head"]: r for r in head_stats(traces)}
    for head in (0, 1):
        per = [next(r for r in sentence_stats(t) if r["head"] == head) for t in traces]
        for name in COLUMNS:
            mean = sum(r[name] * r["queries"] for r in per) / sum(r["queries"] for r in per)
            assert pooled[head][name] == pytest.approx(mean)


# -- profiles of the bundled model -----------------------------------------------------------------------
def test_profile_of_translations_matches_head_stats(model) -> None:
    table = profile(model, SOURCES, batch=2)
    results = model.translate(SOURCES, record=True)
    check_against_head_stats(table, [r.trace for r in results])
    assert [by_head(table, i)[("cross", 0, 0)]["output"] for i in range(3)] == [r.text for r in results]
    assert by_head(table, 2)[("encoder", 1, 3)]["source"] == SOURCES[2]
    assert set(table.column("pattern").to_pylist()) <= set(PATTERNS)


def test_profile_of_references_is_teacher_forced(model) -> None:
    table = profile(model, SOURCES, REFERENCES)
    check_against_head_stats(table, [model.score(s, t).trace for s, t in zip(SOURCES, REFERENCES, strict=True)])
    assert by_head(table, 1)[("decoder", 2, 1)]["output"] == REFERENCES[1]
    with pytest.raises(DataError, match="3 source lines but 2 target lines"):
        profile(model, SOURCES, REFERENCES[:2])


def test_gold_alignments_give_each_cross_head_its_aer(model) -> None:
    gold = ["0-0 1-1 2-1 4-2 5-3", "0-0 1-1 3-2 6-4", "0-0 1-1 2-2 5-5 6?6"]
    table = profile(model, SOURCES, REFERENCES, gold)
    assert {"aer", "precision", "recall"} <= set(table.column_names)
    trace = model.score(SOURCES[2], REFERENCES[2]).trace
    src_words = piece_words(trace.src_tokens, SOURCES[2].split())
    tgt_words = piece_words(trace.tgt_tokens, REFERENCES[2].split())
    sure, possible = {(0, 0), (1, 1), (2, 2), (5, 5)}, {(0, 0), (1, 1), (2, 2), (5, 5), (6, 6)}
    rows = by_head(table, 2)
    for layer in trace.layers["cross"]:
        for head in range(trace.n_heads):
            expected = aer(word_links(trace.attention("cross", layer)[head], src_words, tgt_words), sure, possible)
            assert rows[("cross", layer, head)]["aer"] == pytest.approx(expected["aer"], abs=1e-6)
            assert rows[("cross", layer, head)]["recall"] == pytest.approx(expected["recall"], abs=1e-6)
    assert rows[("encoder", 0, 0)]["aer"] is None  # AER is of cross-attention only
    with pytest.raises(DataError, match="references"):
        profile(model, SOURCES, None, gold)


def test_no_sentences_are_refused(model) -> None:
    """`profile(model, [])` was an empty table, as if every head had been read."""
    with pytest.raises(DataError, match="^no source sentences to profile$"):
        profile(model, [])


def test_a_gold_that_cannot_give_an_aer_is_refused_and_one_that_looks_1_indexed_is_said(model) -> None:
    """As `evaluate` says: a gold of blank lines or possible links only gave every head AER 1.0 and
    recall 1.0, and one written from 1 read from 0 ranked other heads first, both without a word."""
    for gold in (["", "", ""], ["0?0", "1p1", ""]):
        with pytest.raises(DataError, match="^gold: no sure links: AER is undefined without them$"):
            profile(model, SOURCES, REFERENCES, gold)
    with pytest.warns(UserWarning, match="1-indexed"):
        profile(model, SOURCES, REFERENCES, ["1-1 2-2 3-3", "1-1 2-2", "1-1 2-2 3-3"])


def test_direct_shares_are_each_heads_mean_share_of_the_logits(model, tmp_path: Path) -> None:
    """`heads profile --direct`: each decoder and cross head's row is its direct share of the
    sentence's output logits (`logit_attribution`, the mean over the pieces); encoder heads write
    none (null); the Corpus tab reads it as a statistic, the cross heads of the top layer first."""
    from attnlab.record.logit_attribution import logit_attribution

    table = profile(model, SOURCES[:2], REFERENCES[:2], direct=True)
    for index in range(2):
        shares = logit_attribution(model, model.score(SOURCES[index], REFERENCES[index]).trace)
        rows = by_head(table, index)
        for (kind, layer, head), row in rows.items():
            if kind == "encoder":
                assert row["direct"] is None
            else:
                grid = shares.self_heads if kind == "decoder" else shares.cross_heads
                assert row["direct"] == pytest.approx(grid[layer, head].mean(), abs=1e-5), (kind, layer, head)
    path = write_profile(table, tmp_path / "direct.parquet", {"mode": "reference"})
    read = read_profile(path)
    assert read.stats[-1] == "direct"
    _, grid = read.grid("direct", "cross")
    assert np.nanargmax(grid.max(1)) == 2 and np.isnan(read.grid("direct", "encoder")[1]).all()
    source = tmp_path / "in.en"
    source.write_text(SOURCES[0] + "\n", encoding="utf-8")
    argv = ["heads", "profile", "--checkpoint", str(BUNDLED), "--src", str(source), "--quiet", "--direct"]
    assert main([*argv, "--out", str(tmp_path / "cli.parquet")]) == 0
    assert "direct" in read_profile(tmp_path / "cli.parquet").stats


def test_chinese_references_are_read_as_align_reads_them() -> None:
    """A word-segmented Chinese reference ("我 爱 你 。") was scored with its spaces, which the
    model never saw (it was trained on unspaced Chinese): −5.75 a token, and each head's AER
    disagreed with `align_lines` in 17 of 24 (sentence, head) pairs."""
    checkpoint = ROOT / "checkpoints" / "tatoeba-en-zh"
    if not (checkpoint / "manifest.json").is_file():
        pytest.skip("the bundled checkpoints/tatoeba-en-zh is not here")
    chinese = load(checkpoint)
    sources, references = ["I love you .", "Tom is here ."], ["我 爱 你 。", "汤姆 在 这里 。"]
    gold = ["0-0 1-1 2-2 3-3"] * 2
    table = profile(chinese, sources, references, gold)
    heads = [
        reading("head", layer, head)
        for layer in range(chinese.config.n_layers)
        for head in range(chinese.config.n_heads)
    ]
    found, failed = align_lines(chinese, [f"{s} ||| {t}" for s, t in zip(sources, references, strict=True)], heads)
    links = read_pharaoh(gold, lengths=[(4, 4), (4, 4)])
    assert not failed
    for sentence, reference in enumerate(references):
        rows = by_head(table, sentence)
        for head, links_of_head in zip(heads, found, strict=True):
            expected = aer(links_of_head[sentence], *links[sentence])["aer"]
            assert rows[("cross", head["layer"], head["head"])]["aer"] == pytest.approx(expected), (sentence, head)
        unspaced = chinese.score(sources[sentence], "".join(reference.split()), record=False)
        assert rows[("cross", 0, 0)]["output"] == unspaced.text
        assert rows[("cross", 0, 0)]["score"] == pytest.approx(unspaced.score, abs=1e-5)


# -- the command and DuckDB --------------------------------------------------------------------------------
EOS_SQL = "SELECT sentence, layer, head, eos FROM profile WHERE kind = 'cross' ORDER BY eos DESC LIMIT 1"


def test_cli_profile_then_query(model, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "src.en").write_text("\n".join(SOURCES) + "\n")
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES) + "\n")
    out = tmp_path / "profile.parquet"
    argv = ["heads", "profile", "--checkpoint", str(BUNDLED), "--src", str(tmp_path / "src.en"), "--quiet"]
    assert main([*argv, "--tgt", str(tmp_path / "ref.de"), "--out", str(out)]) == 0
    found = read_profile(out)
    assert (
        found.meta["mode"] == "reference" and found.n_sentences == 3 and found.kinds == ["encoder", "decoder", "cross"]
    )
    manifest = json.loads((BUNDLED / "manifest.json").read_text())  # which weights, not only the directory's name
    assert found.meta["model_sha256"] == manifest["files"]["model.safetensors"]["sha256"]
    capsys.readouterr()
    assert main(["heads", "query", str(out), EOS_SQL]) == 0
    header, line = capsys.readouterr().out.strip().splitlines()
    assert header.split("\t") == ["sentence", "layer", "head", "eos"]
    # the same answer from Python, and from the table itself
    names, rows = query(out, EOS_SQL)
    assert names == ["sentence", "layer", "head", "eos"] and [str(v) for v in rows[0][:3]] == line.split("\t")[:3]
    table = pq.read_table(out).to_pylist()
    top = max((r for r in table if r["kind"] == "cross"), key=lambda r: r["eos"])
    assert rows[0][:3] == (top["sentence"], top["layer"], top["head"])
    assert rows[0][3] == pytest.approx(top["eos"])
    # each head's pattern on each sentence, counted by SQL (the Heads tab's sentence, named)
    names, counted = query(out, "SELECT pattern, count(*) AS n FROM profile GROUP BY pattern ORDER BY n DESC")
    assert sum(n for _, n in counted) == len(table) and {p for p, _ in counted} <= set(PATTERNS)
    # the Corpus view's numbers: a grid cell is the mean over sentences, extremes are sorted
    layers, grid = found.grid("eos", "cross")
    cells = [r["eos"] for r in table if r["kind"] == "cross" and (r["layer"], r["head"]) == (top["layer"], top["head"])]
    assert grid[layers.index(top["layer"]), top["head"]] == pytest.approx(np.mean(cells))
    extremes = found.extremes("eos", "cross", top["layer"], top["head"], n=3)
    assert extremes[0]["sentence"] == top["sentence"] and [e["value"] for e in extremes] == sorted(cells, reverse=True)
    # bad SQL is one line on stderr and status 2, not a traceback
    sql = "SELECT 123456.789::DOUBLE AS x, 1/3 AS third, 'a\tb\\c' || chr(10) AS t, NULL AS n"
    assert main(["heads", "query", str(out), sql]) == 0  # 4 significant digits, and a tab made a column more
    assert capsys.readouterr().out == "x\tthird\tt\tn\n123456.789\t0.3333333333333333\ta\\tb\\\\c\\n\t\n"
    assert main(["heads", "query", str(out), "SELECT nope FROM profile"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    # two statements showed the second's answer alone; another file, DuckDB's error with our view's SQL
    with pytest.raises(AttnlabError, match="^one SQL statement at a time"):
        query(out, "SELECT 1; SELECT count(*) FROM profile")
    for path, said in (
        (tmp_path, "a directory, not a profile file"),
        (tmp_path / "no.parquet", "no such profile file"),
    ):
        with pytest.raises(AttnlabError, match=f"^{re.escape(str(path))}: {said}$"):  # (a directory was "no such")
            query(path, "SELECT 1")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), other)
    for path, said in ((tmp_path / "src.en", "not a readable profile"), (other, "not an attnlab profile")):
        with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))}: {said}"):
            query(path, "SELECT * FROM profile")
    # so are a batch or a limit below 1 (--batch 0 was a ValueError, --limit -1 dropped the last sentence)
    for bad in (["--batch", "0"], ["--limit", "-1"], ["--limit", "0"], ["--threads", "0"]):
        assert main([*argv, "--out", str(tmp_path / "bad.parquet"), *bad]) == 2
        assert "must be ≥ 1" in capsys.readouterr().err and not (tmp_path / "bad.parquet").exists()


def test_an_out_that_is_not_parquet_is_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`heads profile --out x.csv` wrote Parquet under a .csv name, exit 0: a spreadsheet then
    opened it as garbage. The name is refused in one line, before the checkpoint (missing here) is read."""
    (tmp_path / "src.en").write_text("\n".join(SOURCES) + "\n")
    argv = ["heads", "profile", "--checkpoint", str(tmp_path / "no-checkpoint"), "--src", str(tmp_path / "src.en")]
    for name in ("x.csv", "x", "x.parquet.tmp"):
        assert main([*argv, "--out", str(tmp_path / name)]) == 2
        assert capsys.readouterr().err == (
            f"attnlab heads profile: error: --out {tmp_path / name}: a profile is a Parquet file; name it NAME.parquet\n"
        )
        assert not (tmp_path / name).exists()
    assert main([*argv, "--out", str(tmp_path / "x.Parquet")]) == 2  # the name taken: the checkpoint is missing
    assert "no-checkpoint" in capsys.readouterr().err


def test_bad_input_is_one_line_before_any_decoding(model, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An empty reference (line 2) was "the target is empty", naming no line, after decoding line
    1; gold links past a sentence's end went unnoticed; --out naming a directory failed in
    os.replace after everything was decoded; blank SQL was an AttributeError."""
    with pytest.raises(DataError, match="^target line 2 is empty$"):
        profile(model, SOURCES, [REFERENCES[0], " ", REFERENCES[2]])
    with pytest.raises(AttnlabError, match=r"^gold:2: '99-99' points past the sentence pair's 7 and 6 words$"):
        profile(model, SOURCES, REFERENCES, ["0-0", "0-0 99-99", "0-0"])
    with pytest.raises(AttnlabError, match=r"gold:1: '6-1' points past .* pass --gold-one-indexed$"):
        profile(model, SOURCES, REFERENCES, ["6-1", "", ""])  # 1-indexed gold read from 0: 6 of 6 words
    (tmp_path / "src.en").write_text("\n".join(SOURCES) + "\n")
    argv = ["heads", "profile", "--checkpoint", str(tmp_path / "no-checkpoint"), "--src", str(tmp_path / "src.en")]
    assert main([*argv, "--out", str(tmp_path)]) == 2  # before the checkpoint (missing here) is read
    assert (
        capsys.readouterr().err.strip()
        == f"attnlab heads profile: error: --out {tmp_path} is a directory; name the file to write"
    )
    written = write_profile(pa.table({"sentence": pa.array([0], pa.int32())}), tmp_path / "p.parquet", {})
    for sql in ("", "  ", "-- only a comment"):
        with pytest.raises(AttnlabError, match="no SQL statement to run"):
            query(written, sql)


def test_a_line_too_long_is_refused_by_file_and_line_or_cut_with_truncate(
    model, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A 1500-piece line was profiled over its first 1023 pieces, exit 0, not a word said; now it
    is refused as `record` and `translate` refuse it, and `--truncate` cuts it and says so."""
    long = " ".join(["dog"] * 1500)
    src = tmp_path / "long.en"
    src.write_text(f"{SOURCES[0]}\n{long}\n")
    ref = tmp_path / "ref.de"
    ref.write_text(f"{REFERENCES[0]}\n{REFERENCES[1]}\n")
    out = tmp_path / "p.parquet"
    argv = ["heads", "profile", "--checkpoint", str(BUNDLED), "--src", str(src), "--quiet", "--out", str(out)]
    room = model.config.max_len - 1
    assert main(argv) == 2  # before any decoding
    error = f"attnlab heads profile: error: {src}:2: the input has 1500 pieces; this model takes at most {room}"
    assert capsys.readouterr().err.strip() == error and not out.exists()
    assert main([*argv, "--tgt", str(ref)]) == 2
    assert capsys.readouterr().err.strip() == error
    ref.write_text(f"{long}\n{REFERENCES[1]}\n")  # a reference too long names the reference file
    src.write_text(f"{SOURCES[0]}\n{SOURCES[1]}\n")
    assert main([*argv, "--tgt", str(ref)]) == 2
    assert (
        capsys.readouterr().err.strip().startswith(f"attnlab heads profile: error: {ref}:1: the target has 1500 pieces")
    )
    assert main([*argv, "--tgt", str(ref), "--truncate"]) == 0
    notice = (
        f"attnlab heads profile: warning: 1 of 2 lines cut to the {room} pieces this model takes (the first: line 1)"
    )
    assert notice in capsys.readouterr().err.splitlines()
    assert read_profile(out).n_sentences == 2
    with pytest.raises(
        ModelInputError, match=f"^source:1: the input has 1500 pieces; this model takes at most {room}$"
    ):
        profile(model, [long])


def test_sources_are_read_from_stdin_for_a_dash(
    model, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`heads profile --src -` failed with "cannot read -: No such file", where `record` reads stdin."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(("\n".join(SOURCES[:2]) + "\n").encode())))
    (tmp_path / "ref.de").write_text("\n".join(REFERENCES[:2]) + "\n")
    out = tmp_path / "p.parquet"
    argv = ["heads", "profile", "--checkpoint", str(BUNDLED), "--src", "-", "--tgt", str(tmp_path / "ref.de")]
    assert main([*argv, "--quiet", "--out", str(out)]) == 0
    assert read_profile(out).table.column("source").unique().to_pylist() == SOURCES[:2]
    assert main([*argv[:-1], "-", "--out", str(out)]) == 2
    assert "--src and --tgt both read stdin (-)" in capsys.readouterr().err


def test_what_is_not_a_list_of_lines_or_a_batch_size_is_one_line(model) -> None:
    """batch=0 was range()'s ValueError, a None line an AttributeError, and a string was read a
    character a line."""
    for batch in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match=f"^batch must be a whole number ≥ 1, got {batch}$"):
            profile(model, SOURCES, batch=batch)
    with pytest.raises(DataError, match=r"^source line 2 is not text \(got NoneType\)$"):
        profile(model, [SOURCES[0], None])
    with pytest.raises(DataError, match=r"^target line 1 is not text \(got bytes\)$"):
        profile(model, SOURCES[:1], [REFERENCES[0].encode()])
    with pytest.raises(DataError, match="^expected a list of source lines, got str$"):
        profile(model, SOURCES[0])
    assert len(profile(model, SOURCES[:2], batch=np.int64(1))) == len(profile(model, SOURCES[:2], batch=2))


def test_foreign_files_are_refused(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": [1]}), tmp_path / "other.parquet")
    with pytest.raises(CheckpointError, match="not an attnlab profile"):
        read_profile(tmp_path / "other.parquet")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(CheckpointError, match="not a readable profile"):
        read_profile(tmp_path / "junk.parquet")


# -- the explorer opens profiles under its roots only ------------------------------------------------------
def test_profiles_open_only_under_the_roots(tmp_path: Path) -> None:
    from attnlab.app.explorer.corpus import resolve_profile
    from attnlab.app.roots import CheckpointRoots

    root, outside = tmp_path / "classroom", tmp_path / "secret"
    (root / "runs").mkdir(parents=True)
    outside.mkdir()
    table = pa.table({"sentence": pa.array([0], pa.int32())})
    for path in (root / "runs" / "p.parquet", root / "top.parquet", outside / "s.parquet"):
        write_profile(table, path, {})
    (root / "link.parquet").symlink_to(outside / "s.parquet")
    (root / "escape").symlink_to(outside, target_is_directory=True)
    roots = CheckpointRoots([root])
    assert resolve_profile(roots, "classroom/runs/p.parquet") == (root / "runs" / "p.parquet").resolve()
    assert resolve_profile(roots, "top.parquet") == (root / "top.parquet").resolve()
    assert resolve_profile(roots, str(root / "runs" / "p.parquet")) == (root / "runs" / "p.parquet").resolve()
    refused = [str(outside / "s.parquet"), "classroom/link.parquet", "escape/s.parquet", "classroom/escape/s.parquet",
               "/etc/passwd", "classroom/../secret/s.parquet", "classroom/runs", "classroom/runs/none.parquet", ""]  # fmt: skip
    for request in refused:
        with pytest.raises(CheckpointError) as caught:
            resolve_profile(roots, request)
        assert str(caught.value) == roots.refusal and os.sep + "secret" not in str(caught.value)
