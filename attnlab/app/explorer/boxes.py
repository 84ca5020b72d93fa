"""The decoding settings' number boxes (beam size, α), bound to the store's parameters.

A browser sends what its box holds, and a crafted request what no box holds: ±inf or NaN in the
beam box, ±inf or 1e9 for α. Panel's own boxes handed it to param, whose ValueError Panel logged
as "Callback failed" with a traceback, and the box went on showing the value. These boxes ask the
store first (`Store.takes`): a value it refuses never reaches param, the store says why in its
notices, and the box shows the value the store kept (`screen.kept`, as the menus do).
"""

from __future__ import annotations

from typing import Any

import panel as pn

from attnlab.app.explorer.heads import bokeh_edit
from attnlab.app.explorer.screen import kept, whole
from attnlab.app.explorer.store import Store


class _Screened:
    """A Panel number box whose browser values pass `Store.takes` before they are applied."""

    _store: Store
    _setting: str

    def _process_property_change(self, props: dict[str, Any]) -> dict[str, Any]:
        params = super()._process_property_change(props)  # type: ignore[misc]
        if isinstance(self, pn.widgets.IntInput):  # a JSON 3.0 is the whole number 3
            for key in ("value", "value_throttled"):
                if isinstance(params.get(key), float) and whole(params[key]):
                    params[key] = int(params[key])
        params = kept(self, params, lambda sent: self._store.takes(self._setting, sent))  # type: ignore[arg-type]
        if "value" in params and params["value"] is None:  # emptied: the task's default is used
            bokeh_edit(self._shown_empty)
        return params

    def _process_param_change(self, params: dict[str, Any]) -> dict[str, Any]:
        """An empty value goes to the browser as None, which its box shows as nothing: Panel sends
        it as NaN, which the box shows as "NaN", and its update could follow `_shown_empty`'s."""
        emptied = "value" in params and params["value"] is None
        sent = super()._process_param_change(params)  # type: ignore[misc]
        if emptied:
            sent["value"] = None
        return sent

    def _shown_empty(self) -> None:
        """An emptied box shows nothing: the browser sent NaN for it, and went on showing "NaN"
        (Panel sends no value back to the browser that changed it)."""
        for model, _parent in self._models.values():  # type: ignore[attr-defined]
            model.value = None


class BeamInput(_Screened, pn.widgets.IntInput):
    """The beam-size box."""


class AlphaInput(_Screened, pn.widgets.FloatInput):
    """The length-penalty (α) box."""


def number_box(kind: type[BeamInput | AlphaInput], store: Store, setting: str, **params: Any) -> Any:
    """A `kind` box bound to the store's parameter `setting` both ways (`from_param`)."""
    box = kind.from_param(store.param[setting], **params)
    box._store, box._setting = store, setting
    return box
