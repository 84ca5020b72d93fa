"""Constrained decoding for parsing (§6.3): only well-formed linearised trees can come out.

An unconstrained decoder drops or invents words (PEERS.md: 246 of 295 outputs had the wrong
number of leaves after 25 minutes of training). This wrapper around any `Stepper` allows, at
each step, only the moves that keep the output a tree over exactly the input's words:

- `XX` (a leaf) while words remain and a constituent is open;
- `(LABEL` while words remain (no empty constituents) and the length limit leaves room;
- `)LABEL` only for the innermost open label, only once it has a child, and the root only
  after the last word;
- `</s>` only when the root is closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from attnlab.decode import Stepper
from attnlab.treebank import PLACEHOLDER

WORD_START = "\u2581"  # sentencepiece's word-boundary mark


@dataclass(frozen=True)
class TreeState:
    stack: tuple[tuple[str, int], ...] = ()  # (label, children so far) of the open constituents
    leaves: int = 0
    done: bool = False  # the root was closed
    length: int = 0  # tokens produced


class TreeConstraint:
    """A `Stepper` that masks every move that would break the tree (see the module docstring)."""

    def __init__(
        self, inner: Stepper, pieces: Sequence[str], n_words: Sequence[int], max_lens: Sequence[int], eos: int
    ) -> None:
        self.inner, self.n_words_all, self.max_lens_all, self.eos = inner, list(n_words), list(max_lens), eos
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
            raise ValueError("this vocabulary has no tree symbols; is it a parsing checkpoint?")
        self.open_ids = torch.tensor(sorted(self.opens))

    def start(self, rows: Tensor) -> None:
        self.inner.start(rows)
        self.n_words = [self.n_words_all[r] for r in rows.tolist()]
        self.max_lens = [self.max_lens_all[r] for r in rows.tolist()]
        self.states = [TreeState() for _ in self.n_words]

    def reorder(self, index: Tensor) -> None:
        self.inner.reorder(index)
        order = index.tolist()
        self.states = [self.states[i] for i in order]
        self.n_words = [self.n_words[i] for i in order]
        self.max_lens = [self.max_lens[i] for i in order]

    def _advance(self, state: TreeState, token: int) -> TreeState:
        stack = list(state.stack)
        if stack and token in (self.leaf, *self.opens):
            label, children = stack[-1]
            stack[-1] = (label, children + 1)
        if token == self.leaf:
            return TreeState(tuple(stack), state.leaves + 1, False, state.length + 1)
        if token in self.opens:
            return TreeState((*stack, (self.opens[token], 0)), state.leaves, False, state.length + 1)
        stack.pop() if stack else None
        return TreeState(tuple(stack), state.leaves, not stack, state.length + 1)

    def step(self, tokens: Tensor) -> Tensor:
        if tokens.size(1) > 1:  # apply the move each row made last step
            last = tokens[:, -1].tolist()
            self.states = [self._advance(s, t) for s, t in zip(self.states, last, strict=True)]
        lprobs = self.inner.step(tokens)
        allowed = torch.zeros_like(lprobs, dtype=torch.bool)
        for row, state in enumerate(self.states):
            words_left = self.n_words[row] - state.leaves
            if state.done:
                allowed[row, self.eos] = True
                continue
            # fewest tokens still needed: the remaining leaves and a close for each open bracket
            needed = words_left + len(state.stack) + (0 if state.stack else 2)
            room = self.max_lens[row] - 1 - state.length  # minus the final </s>
            if state.stack and words_left > 0:
                allowed[row, self.leaf] = True
            if words_left > 0 and room >= needed + 2:
                allowed[row, self.open_ids] = True
            if state.stack and state.stack[-1][1] > 0 and (len(state.stack) > 1 or words_left == 0):
                close = self.closes.get(state.stack[-1][0])
                if close is not None:
                    allowed[row, close] = True
            if not allowed[row].any():  # nothing legal (label without a closer): let the model end
                allowed[row, self.eos] = True
        return lprobs.masked_fill(~allowed.to(lprobs.device), float("-inf"))
