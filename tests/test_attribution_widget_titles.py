"""A logit attribution's titles name a piece the way the piece menu and the line under the grid
do (“Mann”, not “▁Mann”: `viz.piece_word`), the runner-up included; the axes keep sentencepiece's
word mark, which shows where words begin. The notebook box and the explorer's tab draw the same
figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab import viz, widgets
from attnlab.app.i18n import text
from attnlab.app.patching_text import word
from attnlab.decode.api import Model
from attnlab.decode.loading import load
from attnlab.record.logit_attribution import logit_attribution

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "multi30k-en-de"
SENTENCE = "A man is riding a bicycle down the street."
MARK = "\u2581"  # sentencepiece's word mark


@pytest.fixture(scope="module")
def model() -> Model:
    return load(CHECKPOINT)


@pytest.mark.parametrize("lang", ["en", "es"])
def test_the_titles_name_the_piece_as_the_menu_does(model: Model, lang: str) -> None:
    explorer = widgets.explore(model, text=SENTENCE, beam=1, lang=lang)
    box = explorer.attribution
    box.show.value = True
    produced = box.attribution.produced
    marked = [i for i, piece in enumerate(produced) if piece.startswith(MARK) and len(piece) > 1]
    assert len(marked) >= 3, produced
    for against in ("mean", "runner-up"):
        box.against.value = against
        for position in marked:
            box.position.value = position
            named = word(produced, position)
            label = dict((v, k) for k, v in box.position.options)[position]
            assert label == text("ablation.patch_read_piece", lang, position=position, piece=named)
            for figure in ("attribution", "attribution_source"):
                title = " ".join(explorer.figures[figure].title.text.split())
                assert named in title and produced[position] not in title, (figure, title)
            grid = explorer.figures["attribution"].title.text
            if against == "runner-up" and box.attribution.contrast[position].startswith(MARK):
                other = box.attribution.contrast[position]
                assert word(box.attribution.contrast, position) in grid and other not in grid, grid
    assert not explorer.errors.message, explorer.errors.message


def test_viz_titles_name_pieces_without_the_word_mark(model: Model) -> None:
    attribution = logit_attribution(model, model.translate(SENTENCE, record=True).trace, "runner-up")
    position = next(i for i, p in enumerate(attribution.produced) if p.startswith(MARK) and len(p) > 1)
    piece = attribution.produced[position]
    assert f"“{piece[1:]}”" in viz.attribution_title(attribution, position)
    source = viz.logit_source_figure(attribution, position).title.text
    assert f"“{piece[1:]}”" in " ".join(source.split()) and piece not in source
    assert viz.piece_word("▁") == "▁" and viz.piece_word("▁Mann") == word(["▁Mann"], 0) == "Mann"
