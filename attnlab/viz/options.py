"""The options the views take alike, checked one way: `title=` and `budget=`.

A wrong type reached bokeh or numpy first and failed there (`title=123` was a TypeError from
measuring the title, `budget="500"` one from dividing by it), or was drawn without a word
(`budget=0` and a negative one were clamped to the smallest cells).
"""

from __future__ import annotations

from attnlab.errors import AttnlabError
from attnlab.record.trace import whole_number

_UNSET = object()


def check_options(*, title: object = _UNSET, budget: object = _UNSET) -> None:
    """Refuse, in one line naming the argument and the value, a `title` that is not a string (None
    is the view's own title, or none) and a `budget` (the pixels a map's rows, or its columns, may
    take) that is not a whole number > 0. Each view passes the options it takes."""
    if title is not _UNSET and title is not None and not isinstance(title, str):
        raise AttnlabError(f"title must be a string (or None), got {title!r} ({type(title).__name__})")
    if budget is not _UNSET and not (whole_number(budget) and budget > 0):
        raise AttnlabError(f"budget (pixels for a map's rows or columns) must be a whole number > 0, got {budget!r}")
