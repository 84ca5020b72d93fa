"""Constrained decoding for parsing (§6.3): only well-formed linearised trees can come out.

An unconstrained decoder drops or invents words (PEERS.md: 246 of 295 outputs had the wrong
number of leaves after 25 minutes of training). This wrapper around any `Stepper` allows, at
each step, only the moves that keep the output a tree over exactly the input's words:

- a leaf while words remain and a constituent is open: `XX`, or for a parser trained on spelled
  trees (`(NP The dog )NP`) the next input word, its pieces forced one after the other;
- `(LABEL` while words remain (no empty constituents) and the length limit leaves room;
- `)LABEL` only for the innermost open label, only once it has a child, and the root only
  after the last word;
- `</s>` only when the root is closed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.data.tokenizer import composed
from attnlab.data.treebank import PLACEHOLDER
from attnlab.decode.search import Hypothesis, Stepper
from attnlab.errors import CheckpointError, ModelInputError

WORD_START = "\u2581"  # sentencepiece's word-boundary mark


@dataclass(frozen=True)
class TreeState:
    stack: tuple[tuple[str, int], ...] = ()  # (label, children so far) of the open constituents
    leaves: int = 0  # words completed
    done: bool = False  # the root was closed
    length: int = 0  # tokens produced
    piece: int = 0  # spelled leaves: pieces of the current word produced so far (0: between words)


class TreeConstraint:
    """A `Stepper` that masks every move that would break the tree (see the module docstring).

    `words`, for spelled parsers: per sentence, the piece ids of each input word; the leaf is then
    the next word's pieces instead of the one `XX` piece, and `n_words` follows from it.
    """

    def __init__(
        self,
        inner: Stepper,
        pieces: Sequence[str],
        n_words: Sequence[int],
        max_lens: Sequence[int],
        eos: int,
        words: Sequence[Sequence[Sequence[int]]] | None = None,
    ) -> None:
        self.inner, self.max_lens_all, self.eos = inner, list(max_lens), eos
        self.words_all = None if words is None else [[list(w) for w in sentence] for sentence in words]
        self.n_words_all = list(n_words) if words is None else [len(sentence) for sentence in words]
        self.vocab = len(pieces)
        self.leaf: int | None = None
        self.opens: dict[int, str] = {}
        self.closes: dict[str, int] = {}
        for index, piece in enumerate(pieces):
            symbol = piece.removeprefix(WORD_START)
            if symbol == PLACEHOLDER and (self.leaf is None or piece.startswith(WORD_START)):
                self.leaf = index
            elif (
                len(symbol) > 1
                and symbol[0] == "("
                and (symbol not in self.opens.values() or piece.startswith(WORD_START))
            ):
                self.opens[index] = symbol[1:]
            elif (
                len(symbol) > 1 and symbol[0] == ")" and (symbol[1:] not in self.closes or piece.startswith(WORD_START))
            ):
                self.closes[symbol[1:]] = index
        if self.leaf is None or not self.opens:
            raise CheckpointError(
                "this vocabulary has no tree symbols: the checkpoint says it parses, but it is no parser"
            )
        self.open_ids = torch.tensor(sorted(self.opens))
        self.brackets = set(self.opens) | set(self.closes.values())
        # spelled leaves: which word comes next is known, only *whether* one comes is the model's
        # choice, so a leaf is scored by the probability of any word piece there
        self.word_ids = torch.ones(self.vocab, dtype=torch.bool)
        self.word_ids[[*self.brackets, eos, *range(min(4, self.vocab))]] = False  # brackets, </s>, specials

    def start(self, rows: Tensor) -> None:
        self.inner.start(rows)
        order = rows.tolist()
        self.n_words = [self.n_words_all[r] for r in order]
        self.max_lens = [self.max_lens_all[r] for r in order]
        self.words = None if self.words_all is None else [self.words_all[r] for r in order]
        self.states = [TreeState() for _ in self.n_words]

    def reorder(self, index: Tensor) -> None:
        self.inner.reorder(index)
        order = index.tolist()
        self.states = [self.states[i] for i in order]
        self.n_words = [self.n_words[i] for i in order]
        self.max_lens = [self.max_lens[i] for i in order]
        if self.words is not None:
            self.words = [self.words[i] for i in order]

    def _word(self, row: int, state: TreeState) -> list[int]:
        """The pieces of the leaf `state` is at: the next word's, or the one `XX`."""
        return [self.leaf] if self.words is None else self.words[row][state.leaves]

    def _advance(self, row: int, state: TreeState, token: int) -> TreeState:
        stack = list(state.stack)
        length = state.length + 1
        if token in self.opens:
            if stack:
                label, children = stack[-1]
                stack[-1] = (label, children + 1)
            return TreeState((*stack, (self.opens[token], 0)), state.leaves, False, length)
        if token in self.brackets or token == self.eos:  # a close (or the end)
            stack.pop() if stack else None
            return TreeState(tuple(stack), state.leaves, not stack, length)
        if state.piece == 0 and stack:  # a leaf begins: one more child
            label, children = stack[-1]
            stack[-1] = (label, children + 1)
        piece = state.piece + 1
        if piece >= len(self._word(row, state)):
            return TreeState(tuple(stack), state.leaves + 1, False, length)
        return TreeState(tuple(stack), state.leaves, False, length, piece)

    def _pieces_left(self, row: int, state: TreeState) -> int:
        """Leaf pieces still to produce: the rest of the current word and every later word."""
        if self.words is None:
            return self.n_words[row] - state.leaves
        later = sum(len(w) for w in self.words[row][state.leaves :])
        return later - state.piece

    def step(self, tokens: Tensor) -> Tensor:
        if tokens.size(1) > 1:  # apply the move each row made last step
            last = tokens[:, -1].tolist()
            self.states = [self._advance(r, s, t) for r, (s, t) in enumerate(zip(self.states, last, strict=True))]
        lprobs = self.inner.step(tokens)
        allowed = torch.zeros_like(lprobs, dtype=torch.bool)
        if self.words is not None:  # (the leaf scores below are written into the step's own output)
            any_word = torch.logsumexp(lprobs.masked_fill(~self.word_ids.to(lprobs.device), float("-inf")), dim=-1)
        for row, state in enumerate(self.states):
            words_left = self.n_words[row] - state.leaves
            if state.done:
                allowed[row, self.eos] = True
                continue
            if state.piece:  # inside a spelled word: its next piece, which is certain
                piece = self._word(row, state)[state.piece]
                allowed[row, piece] = True
                lprobs[row, piece] = 0.0
                continue
            # fewest tokens still needed: the remaining leaf pieces and a close per open bracket
            needed = self._pieces_left(row, state) + len(state.stack) + (0 if state.stack else 2)
            room = self.max_lens[row] - 1 - state.length  # minus the final </s>
            if state.stack and words_left > 0:
                first = self._word(row, state)[0]
                allowed[row, first] = True
                if self.words is not None:
                    lprobs[row, first] = any_word[row]
            if words_left > 0 and room >= needed + 2:
                allowed[row, self.open_ids] = True
            if state.stack and state.stack[-1][1] > 0 and (len(state.stack) > 1 or words_left == 0):
                close = self.closes.get(state.stack[-1][0])
                if close is not None:
                    allowed[row, close] = True
            if not allowed[row].any():  # nothing legal (label without a closer): let the model end
                allowed[row, self.eos] = True
        return lprobs.masked_fill(~allowed.to(lprobs.device), float("-inf"))


def tree_leaves(text: str, partial: bool = False) -> list[str] | None:
    """The leaves of a linearised tree (its words, or `XX`s), or None unless `text` is exactly
    one whole tree: brackets balanced, every leaf inside one, nothing after the root closes. A
    hypothesis that the length limit ended early is none, and `delinearize` would make up the
    rest of it. `partial`: the leaves of the start of one (a target cut to the model's length)."""
    depth, found, closed = 0, [], False
    for token in text.split():
        bracket = len(token) > 1 and token[0] in "()"
        if closed or (depth == 0 and not (bracket and token[0] == "(")):
            return None
        if bracket:
            depth += 1 if token[0] == "(" else -1
            closed = depth == 0
        else:
            found.append(composed(token))
    return found if closed or partial else None


def _leaf_words(words: Sequence[str], spelled: bool) -> list[str]:
    """The leaves a tree over `words` has: the words themselves (spelled), or one `XX` each."""
    return [composed(w) for w in words] if spelled else [PLACEHOLDER] * len(words)


def whole_trees(
    hyps: list[Hypothesis], decode: Callable[[list[int]], str], words: list[str], spelled: bool
) -> list[Hypothesis]:
    """The hypotheses that are one whole tree over `words`; none is a one-line error (the length
    limit ended them all early), not a tree `delinearize` would make up around the words."""
    whole = [h for h in hyps if tree_leaves(decode(h.tokens[:-1])) == _leaf_words(words, spelled)]
    if not whole:
        raise ModelInputError(
            f"no tree over the input's {len(words)} words fits in the output's length limit "
            "(max_len_a × input + max_len_b, capped at the model's max_len): raise max_len_b or shorten the input"
        )
    return whole


def check_target_tree(text: str, words: list[str], spelled: bool, cut: bool) -> None:
    """A parser scores a tree over the source's words or nothing: the words of another tree came
    back replaced by the source's, a tree that was never scored. (A target cut to the model's
    length: the leaves it has left, its last word perhaps cut too.)"""
    found, expected = tree_leaves(text, partial=cut), _leaf_words(words, spelled)
    if found is not None and cut:
        found, expected = found[:-1], expected[: max(len(found) - 1, 0)]
    if found != expected:
        raise ModelInputError("the target is not a tree over the source's words (in order): nothing to score")
