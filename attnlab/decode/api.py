"""The Python API users script against: `attnlab.load()` and the `Model` it returns.

    model = attnlab.load("checkpoints/multi30k-en-de")
    result = model.translate("A dog runs in the park.", record=True)
    result.text, result.score, result.trace.attention("cross", -1)

Text goes through the checkpoint's own sentencepiece model; decoding uses the paper's settings
by default (translation: beam 4, α 0.6, max length input + 50; parsing: beam 21, α 0.3,
input + 300). With `record=True` the trace is a teacher-forced recorded pass over the output
that was produced, which equals what the decoder computed step by step (tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from attnlab.data.tokenizer import (
    BYTE_PIECE,
    UNSPACED,
    as_read,
    check_text,
    join_unspaced,
    too_long,
    unknown_characters,
)
from attnlab.data.treebank import delinearize, linearize, parse_tree, to_string, treebank_words
from attnlab.decode.constrain import TreeConstraint, check_target_tree, whole_trees
from attnlab.decode.search import (
    Hypothesis,
    check_alpha,
    check_flags,
    check_settings,
    evaluating,
    generate,
    length_penalty,
    scored,
)
from attnlab.errors import AttnlabError, ConfigError, ModelInputError
from attnlab.model.transformer import Transformer
from attnlab.record import ablate
from attnlab.record.recorder import model_info, record
from attnlab.record.trace import AttentionTrace, whole_number

PTB_ESCAPES = {"(": "-LRB-", ")": "-RRB-", "{": "-LCB-", "}": "-RCB-", "[": "-LSB-", "]": "-RSB-"}
DEFAULTS = {
    "translate": {"beam": 4, "alpha": 0.6, "max_len_b": 50},
    "parse": {"beam": 21, "alpha": 0.3, "max_len_b": 300},
}


# Weights made NaN in memory (checkpoints with them are refused when loaded): every hypothesis died
# and `translate` raised an IndexError with beam 4, gave "⁇ ⁇ …" scored NaN with beam 1.
NOT_NUMBERS = "the model computed NaN, not probabilities: its weights are not finite numbers"


def text_list(value: object, what: str = "texts") -> list[Any]:
    """`value`, a list or tuple of texts, as a list; a NumPy array or a pandas column (`tolist()`)
    too. Anything else is named: a string is one text, not a list of its characters; a
    generator would be read once and a set has no order to pair lines by."""
    if isinstance(value, list | tuple):
        return list(value)
    if not isinstance(value, str) and callable(listed := getattr(value, "tolist", None)):
        value = listed()
        if isinstance(value, list):
            return value
    raise ModelInputError(f"expected a list of {what}, got {type(value).__name__}")


@dataclass
class Result:
    """One decoded (or scored) sentence."""

    source: str
    text: str  # the translation, or the bracketed tree for parsing
    tokens: list[str]  # produced pieces, ending in </s>
    src_tokens: list[str]
    score: float  # log P / lp(Y), GNMT's length penalty with the task's α: what the beam ranks by (also for `score`)
    logprob: float
    token_logprobs: list[float] = field(default_factory=list)
    trace: AttentionTrace | None = None
    hypotheses: list[Result] = field(default_factory=list)  # the beam's, best first; theirs empty (no cycle)
    truncated: bool = False  # the input was cut to the model's maximum length
    # source characters the vocabulary lacks, read as byte pieces or <unk>: the output guesses at them
    unknown: list[str] = field(default_factory=list)


class Model:
    """A loaded checkpoint: model + tokenizer(s) + config + metadata.

    `tokenizer` reads the source; `target_tokenizer` writes the output and is the same object
    for attnlab's own models (one shared vocabulary, §3.4). Imported Marian models have one per
    side (`attnlab.data.vocab`)."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Any,
        meta: dict[str, Any],
        path: str | None = None,
        target_tokenizer: Any = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.target_tokenizer = tokenizer if target_tokenizer is None else target_tokenizer
        self._piece_tables: dict[bool, list[str]] = {}
        self._strange: set[int] | None = None  # the source's byte pieces and <unk>, where `unknown` looks
        self.meta, self.path = meta, path
        self.config = model.config
        self.task: str = meta.get("task", "translate")
        self.spelled = meta.get("data", {}).get("leaves") == "words"  # parsers: trees spell the words out
        self.info = model_info(model, path)

    # -- text <-> ids ------------------------------------------------------------------------
    def pieces(self, ids: list[int], source: bool = False) -> list[str]:
        """The pieces of output ids (or, with `source`, of input ids)."""
        table = self.piece_table(source)
        fast = all(type(i) is int and 0 <= i < len(table) for i in ids)  # (`whole_number` on each: 1.4% of a decode)
        if not fast and (bad := [i for i in ids if not (whole_number(i) and 0 <= i < len(table))]):  # -1: last piece
            raise ModelInputError(f"ids must be whole numbers in [0, {len(table)}), got {bad[0]!r}")
        return [table[i] for i in ids]

    def piece_table(self, source: bool = False) -> list[str]:
        """Every piece of the target (or source) vocabulary, by id, built once: asked one id at
        a time, the tokenizer took ~1.5% of decoding test2016 (four hypotheses per sentence)."""
        if source not in self._piece_tables:
            tokenizer = self.tokenizer if source else self.target_tokenizer
            self._piece_tables[source] = [tokenizer.id_to_piece(i) for i in range(tokenizer.get_piece_size())]
        return self._piece_tables[source]

    def unknown(self, text: str, ids: list[int]) -> list[str]:
        """`Result.unknown` of `text` (as `ids`), named only where a byte piece or <unk> is among the ids."""
        if self._strange is None:
            table = self.piece_table(source=True)
            self._strange = {i for i, piece in enumerate(table) if BYTE_PIECE.match(piece)} | {self.tokenizer.unk_id()}
        return unknown_characters(self.tokenizer, text) if not self._strange.isdisjoint(ids) else []

    def encode_source(self, text: str, truncate: bool = False) -> tuple[list[int], bool]:
        if not isinstance(text, str):
            raise ModelInputError(f"expected text, got {type(text).__name__}")
        check_text(text, "input")
        ids = self.tokenizer.encode(as_read(self._unspaced(self._source_text(text), "src_lang")))
        room = self.config.max_len - 1  # </s> takes one position
        if len(ids) > room and not truncate:
            raise too_long("input", len(ids), room)
        return ids[:room] + [self.config.eos_id], len(ids) > room

    def _source_text(self, text: str) -> str:
        """Parsers read the Treebank's words (`treebank_words` of the text `as_read`: a control character
        splits two), brackets escaped as in the Penn Treebank (inside a word too: ":-)" -> ":--RRB-",
        so every tree parses back)."""
        if self.task != "parse":
            return text.strip()
        return " ".join("".join(PTB_ESCAPES.get(char, char) for char in w) for w in treebank_words(as_read(text)))

    def _unspaced(self, text: str, side: str) -> str:
        """Text of a language written without spaces as the model read it in training: word-segmented
        Chinese ("科学家 一直", as alignment gold and many references come) was read with a "▁" piece
        between words that training never showed; `heads profile` and `align` joined the words,
        `score`, `lens` and `heads importance` did not, and weighed other pieces."""
        return join_unspaced(text) if self.meta.get("data", {}).get(side) in UNSPACED else text

    def _batch(self, rows: list[list[int]]) -> torch.Tensor:
        width = max(len(r) for r in rows)
        return torch.tensor([r + [self.config.pad_id] * (width - len(r)) for r in rows])

    def detokenize(self, produced: list[int], source: str) -> str:
        self.pieces(produced)  # an id outside the vocabulary is one line (sentencepiece's was an IndexError)
        text = self.target_tokenizer.decode([i for i in produced if i != self.config.eos_id])
        if self.task == "parse":
            return to_string(delinearize(text.split(), self._source_text(source).split(), self.spelled))
        text = " ".join(text.splitlines())  # one line, as its source: byte pieces can spell U+001D or U+2028
        return self._unspaced(text, "tgt_lang")

    # -- decoding ----------------------------------------------------------------------------
    def translate(
        self,
        text: str | list[str],
        beam: int | None = None,
        alpha: float | None = None,
        max_len_a: float = 1.0,
        max_len_b: int | None = None,
        record: bool = False,
        n_best: int | None = None,
        record_hypotheses: bool = False,
        truncate: bool = False,
        batch_tokens: int = 16000,
        ablate_heads: dict[tuple[str, int], list[int]] | None = None,
        patience: float | None = None,
        constrained: bool = True,
    ) -> Result | list[Result]:
        """Decode one text or a list (batched by length, returned in input order). A batch holds
        at most `batch_tokens` source tokens × beam: on the 2-core CPU test2016 decodes 1.2x
        (fp32) to 1.4x (bf16) faster at 16,000 than at 4,000, and no faster above. `patience` p
        also stops a sentence once ⌈p · beam⌉ hypotheses have ended (fairseq's stop at 1,
        CTranslate2's `patience`): faster, where the default stop (tensor2tensor's, the paper's)
        waits until no live hypothesis can still win (`attnlab.decode.search`). A parser's search
        is `constrained` to trees of the input's words and reranked by the model's own score
        (attnlab's additions); False searches as §6.3 does, a plain beam (its trees read back as
        `delinearize` reads any output: leaves past the words dropped, words left over attached)."""
        settings = DEFAULTS.get(self.task, DEFAULTS["translate"])
        beam = settings["beam"] if beam is None else beam
        alpha = self._alpha(alpha)
        max_len_b = settings["max_len_b"] if max_len_b is None else max_len_b
        check_settings(beam, alpha, max_len_a, max_len_b, n_best, patience=patience)
        check_flags(record=record, record_hypotheses=record_hypotheses, truncate=truncate, constrained=constrained)
        if not constrained and self.task != "parse":
            raise ConfigError("constrained=False is a parser's: a translation's search has no constraint to lift")
        if not whole_number(batch_tokens) or batch_tokens < 1:  # np.int64(100) too, as beam takes it
            raise ConfigError(f"batch_tokens must be a whole number ≥ 1, got {batch_tokens!r}")
        try:
            texts = [text] if isinstance(text, str) else text_list(text)
        except ModelInputError:
            raise ModelInputError(f"expected a text or a list of texts, got {type(text).__name__}") from None
        encoded = [self._encode_item(t, i, len(texts), truncate, isinstance(text, str)) for i, t in enumerate(texts)]
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i][0]))
        results: list[Result | None] = [None] * len(texts)
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * len(encoded[order[end]][0]) * beam <= batch_tokens:
                end += 1
            chunk = order[start:end]
            src = self._batch([encoded[i][0] for i in chunk])
            tree = self.task == "parse" and constrained
            constrain = self._tree_constraint([texts[i] for i in chunk]) if tree else None
            with torch.no_grad(), ablate(self.model, ablate_heads or {}):
                settings = {"n_best": n_best, "constrain": constrain, "patience": patience}
                found = generate(self.model, src, beam, alpha, max_len_a, max_len_b, **settings)
                for row, i in enumerate(chunk):
                    want = record or record_hypotheses  # asking for every hypothesis's maps asks for maps
                    hyps = self._parses(texts[i], encoded[i][0], found[row], alpha) if constrain else found[row]
                    results[i] = self._result(texts[i], encoded[i], hyps, want, record_hypotheses)
            start = end
        return results[0] if isinstance(text, str) else results  # type: ignore[return-value]

    def _encode_item(self, text: str, index: int, count: int, truncate: bool, alone: bool) -> tuple[list[int], bool]:
        """`encode_source`, naming which text of a list it refuses (the whole call is refused:
        a list is one batch, and silently dropping an item would shift the answers)."""
        try:
            return self.encode_source(text, truncate)
        except ModelInputError as error:
            raise error if alone else ModelInputError(f"text {index} of {count}: {error}") from None

    def _alpha(self, alpha: float | None) -> float:
        """The length penalty's α: the given one, else the task's (§6.1: 0.6; §6.3: 0.3)."""
        return DEFAULTS.get(self.task, DEFAULTS["translate"])["alpha"] if alpha is None else alpha

    def _tree_constraint(self, texts: list[str]):
        """Parsers decode under `TreeConstraint`: one leaf per input word, balanced brackets."""
        pieces = self.piece_table(source=True)
        sentences = [self._source_text(t).split() for t in texts]
        spelled = [[self.tokenizer.encode(w) for w in sentence] for sentence in sentences] if self.spelled else None
        n_words = [len(sentence) for sentence in sentences]
        eos = self.config.eos_id
        return lambda stepper, max_lens: TreeConstraint(stepper, pieces, n_words, max_lens, eos, spelled)

    def _parses(self, source: str, src_ids: list[int], hyps: list[Hypothesis], alpha: float) -> list[Hypothesis]:
        """A parser's whole trees (`whole_trees`), scored by the model itself and ranked so. The
        tree constraint steers the search with scores of its own (a spelled word: any word's mass
        at its first piece, nothing for the rest), no model's: rescored teacher-forced, a parse
        scores what `score` gives its tree, so reference trees and parses rank together."""
        words = self._source_text(source).split()
        whole = whole_trees(hyps, self.target_tokenizer.decode, words, self.spelled)
        steps = self._teacher_forced(src_ids, [h.tokens for h in whole])
        rescored = [scored(h.tokens, own, alpha) for h, own in zip(whole, steps, strict=True)]
        return sorted(rescored, key=lambda h: -h.score)

    def parse(self, sentence: str | list[str], **kwargs: Any) -> Result | list[Result]:
        """Bracketed Penn-Treebank tree(s) whose leaves are the input's words (§6.3)."""
        if self.task != "parse":
            raise AttnlabError(f"{self.path or 'this model'} is a {self.task} model, not a parser")
        return self.translate(sentence, **kwargs)

    def _result(
        self,
        source: str,
        encoded: tuple[list[int], bool],
        hyps: list[Hypothesis],
        want_trace: bool,
        trace_all: bool,
    ) -> Result:
        src_ids, truncated = encoded
        if not hyps or math.isnan(hyps[0].score):
            raise AttnlabError(NOT_NUMBERS)
        src_tokens, unknown = self.pieces(src_ids, source=True), self.unknown(source, src_ids)
        results = []
        for rank, hyp in enumerate(hyps):
            results.append(
                Result(
                    source=source,
                    text=self.detokenize(hyp.tokens, source),
                    tokens=self.pieces(hyp.tokens),
                    src_tokens=list(src_tokens),  # its own list: a caller may edit one
                    score=hyp.score,
                    logprob=hyp.logprob,
                    token_logprobs=hyp.step_logprobs,
                    truncated=truncated,
                    unknown=list(unknown),
                )
            )
            if want_trace and (rank == 0 or trace_all):
                results[-1].trace = self._trace(src_ids, hyp.tokens, {"text": source, "output": results[-1].text})
        return replace(results[0], hypotheses=results)

    def _trace(self, src_ids: list[int], produced: list[int], meta: dict[str, Any]) -> AttentionTrace:
        src = torch.tensor([src_ids])
        tgt = torch.tensor([[self.config.bos_id, *produced[:-1]]])
        with torch.no_grad(), evaluating(self.model), record(self.model) as rec:
            self.model(src, tgt)
        src_pieces, tgt_pieces = [self.pieces(src_ids, source=True)], [self.pieces(produced)]
        trace = rec.traces(src, tgt, src_pieces, tgt_pieces, self.info, self.config.pad_id)[0]
        trace.meta.update({"task": self.task, **meta})
        return trace

    def encode_target(
        self, target: str | Result, truncate: bool = False, target_is_linear: bool = False
    ) -> tuple[list[int], bool]:
        """A target's pieces as `score` reads it (a parser's tree linearised; a `Result`'s own
        pieces, not its text encoded again, which can split otherwise: 我|有空 read back as
        我有|空), and whether they were cut to the model's length."""
        if isinstance(target, Result):
            table = {piece: i for i, piece in enumerate(self.piece_table())}
            if unknown := [p for p in target.tokens if p not in table]:
                raise ModelInputError(f"the result holds pieces this model lacks ({unknown[0]!r}, ...)")
            pieces = [table[p] for p in target.tokens if table[p] != self.config.eos_id]
        elif not isinstance(target, str):
            raise ModelInputError(f"expected a target text, got {type(target).__name__}")
        else:
            if self.task == "parse" and not target_is_linear:
                target = " ".join(linearize(parse_tree(target), self.spelled))
            check_text(target, "target")
            pieces = self.target_tokenizer.encode(as_read(self._unspaced(target, "tgt_lang")))
        room = self.config.max_len - 1
        if len(pieces) <= room:
            return pieces, False
        if not truncate:  # scored whole or not at all: a cut target's log-probability is another's
            raise too_long("target", len(pieces), room)
        return pieces[:room], True

    def _teacher_forced(self, src_ids: list[int], outputs: list[list[int]]) -> list[list[float]]:
        """Each output's tokens' log-probabilities (it ends in </s>), teacher-forced, in one batch padded at
        the end (a parser rescores up to 21 trees; the causal mask keeps padding out of earlier positions)."""
        width, c = max(map(len, outputs)), self.config
        tgt = torch.tensor([[c.bos_id, *out[:-1], *[c.pad_id] * (width - len(out))] for out in outputs])
        with torch.no_grad(), evaluating(self.model):
            lprobs = torch.log_softmax(self.model(torch.tensor([src_ids] * len(tgt)), tgt).float(), -1)
        picked = [lprobs[i, : len(out)].gather(-1, torch.tensor(out)[:, None]) for i, out in enumerate(outputs)]
        return [p.squeeze(-1).tolist() for p in picked]

    def score(
        self,
        source: str,
        target: str | Result,
        record: bool = True,
        truncate: bool = False,
        target_is_linear: bool = False,
        alpha: float | None = None,
    ) -> Result:
        """Teacher-forced log-probability of a given target (e.g. a reference translation),
        with the attention maps the model has while reading it. For a parser the target is a
        bracketed tree (or, with `target_is_linear`, its linearisation); a `Result` of a model
        with this vocabulary is read piece for piece as it was produced. A target longer than the
        model takes is an error, or with `truncate` cut (and `truncated` set), as the source is.
        `score` is log P / lp(Y) with the task's α (or `alpha`), as `translate` scores its
        hypotheses, so a reference and the beam's outputs can be ranked together."""
        alpha = self._alpha(alpha)
        check_alpha(alpha)
        check_flags(record=record, truncate=truncate, target_is_linear=target_is_linear)
        src_ids, truncated = self.encode_source(source, truncate)
        pieces, cut = self.encode_target(target, truncate, target_is_linear)
        if self.task == "parse":
            words = self._source_text(source).split()
            if isinstance(target, str) and not (target_is_linear or self.spelled):  # `XX` leaves: the tree's words
                check_target_tree(" ".join(linearize(parse_tree(target), spelled=True)), words, True, False)
            check_target_tree(self.target_tokenizer.decode(pieces), words, self.spelled, cut)
        truncated |= cut
        produced = [*pieces, self.config.eos_id]
        steps = self._teacher_forced(src_ids, [produced])[0]
        if math.isnan(sum(steps)):
            raise AttnlabError(NOT_NUMBERS)
        as_typed = isinstance(target, str) and self.task != "parse" and not cut  # else what was scored, not all of it
        result = Result(
            source=source,
            text=target if as_typed else self.detokenize(produced, source),
            tokens=self.pieces(produced),
            src_tokens=self.pieces(src_ids, source=True),
            score=sum(steps) / length_penalty(len(produced), alpha),
            logprob=sum(steps),
            token_logprobs=steps,
            truncated=truncated,
            unknown=self.unknown(source, src_ids),
        )
        if record:
            output = target if isinstance(target, str) and not cut else result.text
            result.trace = self._trace(src_ids, produced, {"text": source, "output": output, "teacher_forced": True})
        return result
