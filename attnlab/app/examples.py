"""The first sentence a view decodes with a model: written for attnlab, not taken from a corpus.

A model trained on Tatoeba learned short everyday sentences (a median of six words), and the
image captions the Multi30k translator opens on came out wrong in both bundled Tatoeba models
("Un hombre en una camisa azul está tocando la calle.": the guitar gone); such a model opens on an
everyday sentence instead.
"""

from __future__ import annotations

from typing import Any

EVERYDAY = "My friend bought a new bicycle yesterday."


def example(model: Any, examples: dict[str, str]) -> str:
    """The sentence `model` opens on: `examples` by task ("translate", "parse"), the everyday one
    for a translator trained on Tatoeba."""
    data = model.meta.get("data", {}) if isinstance(model.meta, dict) else {}
    if model.task != "parse" and isinstance(data, dict) and data.get("corpus") == "tatoeba":
        return EVERYDAY
    return examples.get(model.task, examples["translate"])
