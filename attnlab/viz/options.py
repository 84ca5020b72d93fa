"""The options the views take alike, checked one way: `title=`, `budget=` and `name=`.

A wrong type reached bokeh or numpy first and failed there (`title=123` was a TypeError from
measuring the title, `budget="500"` one from dividing by it, `name=5` a ValueError from bokeh's
validation), or was drawn without a word (`budget=0` and a negative one were clamped to the
smallest cells); a title with a lone surrogate made a page that could not be written out.
"""

from __future__ import annotations

from attnlab.data.tokenizer import check_unicode
from attnlab.errors import AttnlabError
from attnlab.record.trace import whole_number

_UNSET = object()


def check_options(*, title: object = _UNSET, budget: object = _UNSET, name: object = _UNSET) -> None:
    """Refuse, in one line naming the argument and the value, a `title` or a `name` (the figure's
    bokeh name, by which a page finds it) that is not a string (None is the view's own, or none)
    or holds a lone surrogate (`check_unicode`), and a `budget` (the pixels a map's rows, or its
    columns, may take) that is not a whole number > 0. Each view passes the options it takes."""
    for option, value in (("title", title), ("name", name)):
        if isinstance(value, str):
            check_unicode(value, option)
        elif value is not _UNSET and value is not None:
            raise AttnlabError(f"{option} must be a string (or None), got {value!r} ({type(value).__name__})")
    if budget is not _UNSET and not (whole_number(budget) and budget > 0):
        raise AttnlabError(f"budget (pixels for a map's rows or columns) must be a whole number > 0, got {budget!r}")
