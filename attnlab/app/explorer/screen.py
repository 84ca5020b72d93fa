"""What a browser may choose in the page's menus, button rows and the timeline's step slider:
only a choice they offer.

A crafted websocket message can send any widget any value its Bokeh model's type allows. Panel
looks a menu's value up among its options, a button row's index and the step slider's position
in theirs: a value they do not hold ("no such option", None, 7 for a menu; 99 for a button row;
±inf, NaN or 99 for the slider) was a ValueError or IndexError that Panel logged as "Callback
failed" with a traceback, and some picked a choice the visitor never made, without a word (""
the first option, -1 the last button or the last step, 2.5 the third step; a heads list with an
unknown head kept the others). Screened, such a value is one notice (`Store.refuse`), the choice
stays as it was and the browser shows it again, as the number boxes do with what the store
refuses (`boxes.py`); so is a row a table does not have (`picked_row`: the dashboard's and the
corpus sentences' Bokeh tables, where -1 opened the last row and 999 was an IndexError). Text
boxes, check boxes and download buttons need nothing here: Bokeh refuses a value of another type
before Panel sees it, and the store caps what a text box holds.

A crafted message can also set any other property of a widget's Bokeh model, and Panel applied
it to the widget: a button row's `labels` became its options (the kind buttons' "foo" was a
ValueError that looped into a RecursionError; the decoding row took a mode it does not offer), a
menu's `disabled_options` holding its choice was a ValueError, `title` or `label` renamed a
widget (and the notices that name it), `clicks` or `embed` on a download still off without a
trace was a ValueError, and the tabs' `tabs` closed tabs (`active` 99 was a ValueError, -1 showed
none). A widget now takes from a browser only what a visitor changes in the page (`BROWSER`), and
nothing while it is off (`_guard`); the tabs take only a tab they have.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import panel as pn

from attnlab.app.explorer.store import Store, sentence
from attnlab.app.i18n import grouped, text

SENT = ("value", "value_throttled", "active")  # the properties through which a browser chooses
BROWSER = (*SENT, "value_input", "clicks")  # all a visitor changes in the page (a download's click)


def kept(widget: pn.widgets.Widget, props: dict[str, Any], takes: Callable[[Any], bool]) -> dict[str, Any]:
    """`props`, a browser's change to `widget`, less its choice when `takes` refuses it: the
    widget then sends the browser the value it kept."""
    sent = [key for key in SENT if key in props]
    if all(takes(props[key]) for key in sent):
        return props
    # The browser shows the kept choice again. An empty menu (a box not drawn yet) has none, and Panel's
    # Select, triggered while empty, resets its value without end (a RecursionError).
    if not (isinstance(widget, pn.widgets.Select) and not widget.options):
        widget.param.trigger("active" if isinstance(widget, pn.Tabs) else "value")
    return {key: value for key, value in props.items() if key not in sent}


def screen(layout: pn.viewable.Viewable, store: Store) -> None:
    """Have every menu, button row and the tabs in `layout` take only a choice they offer (the
    step slider screens itself: `StepSlider`), anything else one notice in `store`; and every
    widget take no property but those a visitor changes (`_guard`)."""
    for tabs in layout.select(pn.Tabs):
        name = text("page.tabs", store.lang)
        _screen(
            tabs,
            store,
            lambda sent, t=tabs: whole(sent) and 0 <= sent < len(t),
            lambda t=tabs: t._names[t.active],
            name,
        )
        _guard(tabs)
    for widget in layout.select(pn.widgets.Widget):
        if isinstance(widget, pn.widgets.Select | pn.widgets.RadioButtonGroup):
            _screen(widget, store, lambda sent, w=widget: _is_choice(w, sent), lambda w=widget: _label(w, w.value))
        elif isinstance(widget, pn.widgets.MultiChoice):  # sends the labels of the picked choices
            _screen(
                widget,
                store,
                lambda sent, w=widget: isinstance(sent, list) and all(_is_label(w, s) for s in sent),
                lambda w=widget: ", ".join(_label(w, v) for v in w.value) or "—",
            )
        _guard(widget)


class StepSlider(pn.widgets.DiscreteSlider):
    """A DiscreteSlider whose inner slider (the browser's: it sends the position of a step, and
    Panel builds a new one whenever the steps change) takes only the position of a step."""

    def __init__(self, store: Store, **params: Any) -> None:
        self._store = store
        super().__init__(**params)

    @property
    def labels(self) -> list[str]:
        """Panel's ("training step: <b>300</b>"), with the page's colon: a Chinese page writes
        "训练步数：300" (Panel's ASCII colon stood out among the page's full-width ones)."""
        colon = "：" if self._store.lang == "zh" else ": "
        return [label.replace(f"{self.label}: ", f"{self.label}{colon}", 1) for label in super().labels]

    def _update_options(self, *events: Any) -> None:
        super()._update_options(*events)
        _screen(
            self._slider,
            self._store,
            lambda sent: whole(sent) and 0 <= sent < len(self.values),
            lambda: grouped(self.value, self._store.lang),  # as its label writes it (the labels hold markup)
            name=self.name,
        )
        _guard(self._slider)


def picked_row(store: Store, table: str, new: list[int], rows: int) -> int | None:
    """The row of a table (the dashboard's, the corpus sentences') a browser picked -- `new`, its
    selection's indices -- or None: none picked, or a row the table does not have (a crafted -1
    opened the last one, 999 was an IndexError traceback), which is a notice naming `table`."""
    if not new:
        return None
    if whole(new[0]) and 0 <= new[0] < rows:
        return int(new[0])
    said = text("notice.choice_refused", store.lang, widget=table, asked=str(new[0])[:24], kept=store.open_head)
    store.refuse(sentence(said))
    return None


def _screen(
    widget: pn.widgets.Widget,
    store: Store,
    offers: Callable[[Any], bool],
    shown: Callable[[], str],
    name: str = "",
) -> None:
    """Have `widget` drop a browser's choice that `offers` refuses, with a notice naming the
    widget (`name`, else its own) and the choice `shown` it keeps."""
    process = widget._process_property_change

    def takes(sent: Any) -> bool:
        if offers(sent):
            return True
        asked = repr(sent) if isinstance(sent, str) else str(sent)
        said = text("notice.choice_refused", store.lang, widget=name or widget.name, asked=asked[:24], kept=shown())
        store.refuse(sentence(said))
        return False

    widget._process_property_change = lambda props: process(kept(widget, props, takes))


def _guard(widget: pn.viewable.Viewable) -> None:
    """Have `widget` take from a browser only the properties a visitor changes in the page
    (`BROWSER`), and none while it is off, as a browser sends none then: not its options, labels,
    limits, name, file name or `disabled`, which a crafted message can set on its Bokeh model."""
    process = widget._process_property_change

    def visitors(props: dict[str, Any]) -> dict[str, Any]:
        if getattr(widget, "disabled", False):
            return {}
        return {key: value for key, value in props.items() if key in BROWSER}

    widget._process_property_change = lambda props: process(visitors(props))


def whole(sent: Any) -> bool:
    """Whether a browser sent a whole number (a JSON 2.0 is the whole number 2)."""
    return (isinstance(sent, int) and not isinstance(sent, bool)) or (
        isinstance(sent, float) and math.isfinite(sent) and sent.is_integer()
    )


def _is_choice(widget: pn.widgets.Widget, sent: Any) -> bool:
    """Whether `sent` names one of `widget`'s choices: a button row sends its index, a menu the
    choice's value as text (or its label)."""
    if isinstance(widget, pn.widgets.RadioButtonGroup):  # (Bokeh takes no 1.0 for an index)
        return isinstance(sent, int) and not isinstance(sent, bool) and 0 <= sent < len(widget.values)
    return isinstance(sent, str) and (sent in widget.unicode_values or _is_label(widget, sent))


def _is_label(widget: pn.widgets.Widget, sent: Any) -> bool:
    return isinstance(sent, str) and sent in widget.labels


def _label(widget: pn.widgets.Widget, value: Any) -> str:
    """The label `widget` shows for `value` ("—" for none)."""
    values = list(widget.values)
    return str(widget.labels[values.index(value)]) if value in values else "—"
