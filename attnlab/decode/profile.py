"""Corpus-scale head profiles: what every head does on every sentence of a test set.

    attnlab heads profile --checkpoint checkpoints/multi30k-en-de --src test2016.en --out p.parquet
    attnlab heads query p.parquet "SELECT sentence, source FROM profile WHERE kind = 'cross'
                                   ORDER BY eos DESC LIMIT 5"

A profile is one Parquet table (pyarrow) with one row per (sentence, kind, layer, head): the
sentence's index, its source and output text, the head's `attnlab.record.stats.sentence_stats`
columns (entropy, distance, self/prev/next, first, eos, max, diagonal; each the mean over the
sentence's query rows), the head's `pattern` on the sentence (`attnlab.record.stats.head_pattern`:
"prev", "diagonal", "eos", ..., "mixed"; `GROUP BY pattern` counts them) and, given gold word alignments of the references, each cross-attention
head's AER, precision and recall (`attnlab.decode.alignment`, `attnlab.decode.aer`); with
`--importance`, each head's importance for the sentence's output (|∂ log P / ∂ gate|, Michel et al.
2019; `attnlab.record.importance`: the Corpus tab's grid of it is their I_h); with `--direct`, each
decoder and encoder–decoder head's direct share of the output pieces' logits (the mean over the
sentence's pieces, against the mean logit; `attnlab.record.logit_attribution`). Without
references the output is the model's own translation (decoded in batches with its task's search settings, §6.1 or §6.3,
then recorded); with `--tgt` the references are read teacher-forced as `attnlab align` reads them
(`alignment.score_words`: words joined without spaces for Chinese or Japanese, which the model
was trained on unspaced). `query` runs DuckDB over the file, which it calls `profile`.

`Profile` is the same file read back for a screen: a statistic per head averaged over the
sentences (a layers × heads grid per kind) and the sentences where one head is most extreme.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from attnlab.data.tokenizer import is_blank, join_words
from attnlab.decode.aer import aer
from attnlab.decode.alignment import check_lines, score_words, trace_links
from attnlab.decode.api import Model, Result
from attnlab.decode.commands import cut_notice, fit_lines
from attnlab.decode.evaluate_inputs import one_indexed_hint
from attnlab.decode.pharaoh import read_pharaoh
from attnlab.errors import AttnlabError, CheckpointError, ConfigError, DataError, ModelInputError, json_loads, warn
from attnlab.publish import temporary_sibling
from attnlab.record.equation import trace_ids
from attnlab.record.importance import check_model, sentence_importance
from attnlab.record.logit_attribution import logit_attribution
from attnlab.record.stats import COLUMNS, head_pattern, sentence_stats
from attnlab.record.trace import KINDS, check_flag, whole_number

FORMAT, VERSION = "attnlab-profile", 1
ALIGNMENT = ("aer", "precision", "recall")  # of cross-attention heads, with gold alignments; null elsewhere
IMPORTANCE = "importance"  # |∂ log P(output) / ∂ gate| of each head on each sentence (Michel et al. 2019), if asked
DIRECT = "direct"  # each decoder head's mean direct share of the output's logits, if asked; null for encoder heads
PATTERN = "pattern"  # what the head does on the sentence, named (`head_pattern`)
SCHEMA = pa.schema(
    [
        ("sentence", pa.int32()),
        ("kind", pa.string()),
        ("layer", pa.int16()),
        ("head", pa.int16()),
        ("queries", pa.int32()),  # the sentence's query rows of this kind (target or source pieces)
        ("keys", pa.int32()),
        *[(name, pa.float32()) for name in COLUMNS],
        ("score", pa.float32()),  # the output's length-normalised log-probability
        ("source", pa.string()),
        ("output", pa.string()),  # the model's translation, or the reference read teacher-forced
    ]
)


# -- writing --------------------------------------------------------------------------------------------
def profile(
    model: Model,
    sources: list[str],
    targets: list[str] | None = None,
    gold: list[str] | None = None,
    *,
    one_indexed: bool = False,
    reverse_gold: bool = False,
    gold_name: str = "gold",
    names: tuple[str, str] = ("source", "target"),
    truncate: bool = False,
    beam: int | None = None,
    alpha: float | None = None,
    batch: int = 64,
    importance: bool = False,
    direct: bool = False,
    progress: bool = False,
) -> pa.Table:
    """The profile table of `sources` (with `targets`: of the references, teacher-forced; with
    `gold`, Pharaoh lines linking the words of sources and targets: the AER columns too; its
    errors start with `gold_name`; `reverse_gold` for gold written target-source, as the shipped
    zh-en gold is for an en→zh model). With `importance`, each head's importance for each
    sentence's output too (`attnlab.record.importance`: one backward pass a batch); with `direct`,
    each decoder head's mean direct share of its output pieces' logits. A line longer
    than the model takes is an error naming `names` (the sources' and targets') and the line, or
    with `truncate` cut, with a warning."""
    if not whole_number(batch) or batch < 1:  # np.int64(8) too
        raise ConfigError(f"batch must be a whole number ≥ 1, got {batch!r}")
    if check_flag(importance, "importance"):
        check_model(model)  # an int8 model is refused before minutes of decoding
    if not (sources := check_lines(sources, "source")):  # (an empty table, as if every head had been read)
        raise DataError("no source sentences to profile")
    targets = None if targets is None else check_lines(targets, "target")
    gold = None if gold is None else check_lines(gold, "gold")
    for name, lines in (("target", targets), ("gold", gold)):
        if lines is not None and len(lines) != len(sources):
            raise DataError(f"{len(sources)} source lines but {len(lines)} {name} lines")
    for name, lines in (("source", sources), ("target", targets)):
        blank = next((i for i, line in enumerate(lines or []) if is_blank(line)), None)
        if blank is not None:  # before any decoding, which takes minutes
            raise DataError(f"{name} line {blank + 1} is empty")
    links = None
    if gold is not None:
        if targets is None:
            raise DataError("gold alignments link the words of references: give the references (--tgt) too")
        lengths = [(len(s.split()), len(t.split())) for s, t in zip(sources, targets, strict=True)]
        links = read_pharaoh(gold, one_indexed=one_indexed, reverse=reverse_gold, lengths=lengths, name=gold_name)
        if not any(sure for sure, _ in links):  # every head's AER 1.0 and recall 1.0, as `evaluate` refuses
            raise DataError(f"{gold_name}: no sure links: AER is undefined without them")
        if not one_indexed and (hint := one_indexed_hint(links, gold_name)):  # (scored: a hint, not proof)
            warn(hint)
    if targets is None:
        cut = fit_lines(model, sources, None, names, truncate)  # before minutes of decoding
    else:  # each pair as `score_words` reads it: a Chinese side's words joined unspaced
        langs = model.meta.get("data", {})
        src_texts = [join_words(line.split(), langs.get("src_lang")) for line in sources]
        tgt_texts = [join_words(line.split(), langs.get("tgt_lang")) for line in targets]
        cut = fit_lines(model, src_texts, tgt_texts, names, truncate)
    if cut:
        warn(cut_notice(cut, len(sources), model))
    check_flag(direct, "direct")
    extra = [
        *(ALIGNMENT if links is not None else ()),
        *((IMPORTANCE,) if importance else ()),
        *((DIRECT,) if direct else ()),
    ]
    # (the pattern is not in SCHEMA: a profile written before it had none, and is read all the same)
    schema = pa.schema([*SCHEMA, pa.field(PATTERN, pa.string()), *(pa.field(name, pa.float32()) for name in extra)])
    columns: dict[str, list] = {field.name: [] for field in schema}
    bar = tqdm(total=len(sources), unit="sent", disable=not progress, file=sys.stderr, desc="profile")
    for start in range(0, len(sources), batch):
        chunk = list(range(start, min(start + batch, len(sources))))
        if targets is None:
            results = model.translate(
                [sources[i] for i in chunk], beam=beam, alpha=alpha, record=True, truncate=truncate
            )
            read = [(result, None) for result in results]
        else:
            read = [_reference(model, sources[i], targets[i], i, links[i] if links else None, truncate) for i in chunk]
        weighed = (
            sentence_importance(model.model, [trace_ids(model, r.trace) for r, _ in read])[0] if importance else None
        )
        for j, (i, (result, scores)) in enumerate(zip(chunk, read, strict=True)):
            written = _direct_shares(model, result) if direct else None
            _add_rows(columns, i, result, scores, None if weighed is None else weighed[j], written)
        bar.update(len(chunk))
    bar.close()
    return pa.table(columns, schema=schema)


def _reference(
    model: Model, source: str, target: str, index: int, gold: tuple[set, set] | None, truncate: bool
) -> tuple[Result, dict[tuple[int, int], dict] | None]:
    """The reference read teacher-forced as `attnlab align` reads it, and given its gold (sure,
    possible) links, {(layer, head): AER, precision, recall} of each cross-attention head's
    argmax links between the whitespace-separated words of the two lines (`align --method head`'s
    links, computed the same way). A target the model cannot take names its line."""
    try:
        result, src_words, tgt_words = score_words(model, source.split(), target.split(), truncate)
    except ModelInputError as error:
        raise ModelInputError(f"target line {index + 1}: {error}") from None
    if gold is None:
        return result, None
    trace = result.trace
    return result, {
        (layer, head): aer(trace_links(trace, src_words, tgt_words, "head", layer, head), *gold)
        for layer in trace.layers["cross"]
        for head in range(trace.n_heads)
    }


def _direct_shares(model: Model, result: Result) -> dict[str, np.ndarray]:
    """{kind: (layers, heads) each head's direct share of the output's logits, the mean over its pieces}."""
    attribution = logit_attribution(model, result.trace)
    return {"decoder": attribution.self_heads.mean(-1), "cross": attribution.cross_heads.mean(-1)}


def _add_rows(
    columns: dict[str, list],
    index: int,
    result: Result,
    scores: dict | None,
    weighed: np.ndarray | None,
    written: dict[str, np.ndarray] | None = None,
) -> None:
    """One sentence's rows: its heads' statistics, alignment scores (`scores`, of cross-attention
    heads), importance (`weighed`, (kinds, layers, heads)) and direct shares (`written`, by kind;
    encoder heads write into no logit directly: null)."""
    for row in sentence_stats(result.trace):
        row.update(sentence=index, score=result.score, source=result.source, output=result.text)
        row[PATTERN] = head_pattern(row)[0]
        if scores is not None:
            found = scores.get((row["layer"], row["head"])) if row["kind"] == "cross" else None
            row.update({name: None if found is None else found[name] for name in ALIGNMENT})
        if weighed is not None:
            row[IMPORTANCE] = float(weighed[KINDS.index(row["kind"]), row["layer"], row["head"]])
        if written is not None:
            shares = written.get(row["kind"])
            row[DIRECT] = None if shares is None else float(shares[row["layer"], row["head"]])
        for name, values in columns.items():
            values.append(row[name])


def write_profile(table: pa.Table, path: str | os.PathLike, about: dict[str, Any]) -> Path:
    """Write atomically (temp file + rename), with `about` (checkpoint, mode, ...) in the metadata."""
    meta = {"format": FORMAT, "version": VERSION, **about}
    table = table.replace_schema_metadata({b"attnlab": json.dumps(meta).encode()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(path, directory=False)
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# -- reading ----------------------------------------------------------------------------------------------
@dataclass
class Profile:
    """A profile read back: the table and what its metadata says."""

    table: pa.Table
    meta: dict[str, Any]

    @property
    def stats(self) -> list[str]:
        """The per-head statistics it holds (AER, precision, recall with gold alignments; importance
        and direct shares if they were asked for)."""
        return [name for name in (*COLUMNS, *ALIGNMENT, IMPORTANCE, DIRECT) if name in self.table.column_names]

    @property
    def kinds(self) -> list[str]:
        present = set(self.table.column("kind").unique().to_pylist())
        return [kind for kind in ("encoder", "decoder", "cross") if kind in present]

    @property
    def n_sentences(self) -> int:
        return len(self.table.column("sentence").unique())

    def _column(self, name: str) -> np.ndarray:
        return self.table.column(name).to_numpy(zero_copy_only=False)

    def grid(self, stat: str, kind: str) -> tuple[list[int], np.ndarray]:
        """(layers, (layers, heads) mean of `stat` over the sentences; NaN where it has none)."""
        if stat not in self.stats:
            raise AttnlabError(f"this profile has no statistic {stat!r} (it has: {', '.join(self.stats)})")
        rows = self._column("kind") == kind
        layers, heads = self._column("layer")[rows], self._column("head")[rows]
        values = self._column(stat)[rows].astype(np.float64)
        layer_ids = sorted(set(layers.tolist()))
        sums = np.zeros((len(layer_ids), int(heads.max()) + 1 if len(heads) else 0))
        counts = np.zeros_like(sums)
        at = np.searchsorted(layer_ids, layers)
        good = ~np.isnan(values)
        np.add.at(sums, (at[good], heads[good]), values[good])
        np.add.at(counts, (at[good], heads[good]), 1)
        with np.errstate(invalid="ignore"):
            return layer_ids, sums / counts

    def extremes(self, stat: str, kind: str, layer: int, head: int, n: int = 10, largest: bool = True) -> list[dict]:
        """The `n` sentences where (kind, layer, head) has the largest (or smallest) `stat`:
        {sentence, value, source, output}, most extreme first."""
        rows = np.flatnonzero(
            (self._column("kind") == kind) & (self._column("layer") == layer) & (self._column("head") == head)
        )
        values = self._column(stat)[rows].astype(np.float64)
        rows, values = rows[~np.isnan(values)], values[~np.isnan(values)]
        order = np.argsort(-values if largest else values, kind="stable")[:n]
        picked = self.table.take(pa.array(rows[order])).select(["sentence", "source", "output"]).to_pylist()
        return [{**row, "value": float(values[i])} for row, i in zip(picked, order, strict=True)]


def read_profile(path: str | os.PathLike) -> Profile:
    """Read a profile file; anything else (not Parquet, another table or version) is one line."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        raise CheckpointError(f"{path}: not a readable profile ({type(error).__name__})") from None
    meta = _profile_meta(path, table.schema.metadata)
    missing = [field.name for field in SCHEMA if field.name not in table.column_names]
    if missing:
        raise CheckpointError(f"{path}: damaged profile (no column {missing[0]!r})")
    return Profile(table, meta)


def _profile_meta(path: Path, metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    """The attnlab entry of a Parquet schema's metadata, or one line: not a profile, another version."""
    try:
        meta = json_loads((metadata or {}).get(b"attnlab", b"{}"))
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an attnlab profile")
    if meta.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: profile version {meta.get('version')} is not supported (this attnlab reads {VERSION})"
        )
    return meta


def query(path: str | os.PathLike, sql: str) -> tuple[list[str], list[tuple]]:
    """(column names, rows) of one DuckDB statement over the profile file as `profile`; the file is
    checked first (DuckDB's error quoted our view's SQL), and "A; B" is refused (it showed B only)."""
    path = Path(path)
    if not path.is_file():  # (a directory was "no such profile file")
        raise DataError(f"{path}: {'a directory, not a profile file' if path.is_dir() else 'no such profile file'}")
    try:
        _profile_meta(path, pq.read_schema(path).metadata)
    except (OSError, pa.ArrowException) as error:
        raise CheckpointError(f"{path}: not a readable profile ({type(error).__name__})") from None
    quoted = "'" + str(path).replace("'", "''") + "'"
    with duckdb.connect() as con:
        try:
            if len(con.extract_statements(sql)) > 1:
                raise AttnlabError("one SQL statement at a time: its answer is the one shown")
            con.execute(f"CREATE VIEW profile AS SELECT * FROM read_parquet({quoted})")
            cursor = con.execute(sql)
            if cursor is None:  # DuckDB's answer to blank SQL, or to comments only
                raise AttnlabError(
                    "no SQL statement to run, e.g. 'SELECT kind, avg(entropy) FROM profile GROUP BY kind'"
                )
            return [d[0] for d in cursor.description or []], cursor.fetchall()
        except duckdb.Error as error:
            raise AttnlabError(" ".join(str(error).split())) from None
