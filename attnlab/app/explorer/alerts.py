"""The error and notice boxes under the inputs. The error box says what went wrong opening a
checkpoint or decoding (`Store.error`) on every tab, and what went wrong in a view
(`Store.view_error`: a profile the Corpus tab refused, an ablation, a view that cannot draw the
trace) only while that view's tab is open: a Corpus error stayed there over every other tab. The
notice box lists the last request's notices (a text cut to the limit, a value refused).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import panel as pn

from attnlab.app.explorer.store import Store

# An alert's text: inside the box's padding (Panel sizes it to the whole box, so a long notice
# ran past the right edge), and wrapped anywhere when a run has no space (Chinese).
ALERT_CSS = "div { width: auto !important; min-width: 0 !important; } p { overflow-wrap: anywhere; }"


# An error said out of sight is brought into it: in a narrow window (a phone, 150% zoom) the page
# is one column and the box sits above the tabs, where a refused Corpus profile or ablation was
# said ~600 px above the button just pressed, which seemed to do nothing.
INTO_VIEW = """setTimeout(() => {
  const view = Bokeh.index.query_one((v) => v.model === cb_obj);
  const box = view && cb_obj.visible ? view.el.getBoundingClientRect() : null;
  if (box && box.height > 0 && (box.bottom < 0 || box.top > window.innerHeight))
    view.el.scrollIntoView({block: "center"});
}, 50);"""


class Alerts:
    """The error box (`error`) and the notice box (`notice`), kept up to date from the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        alert = {"visible": False, "width": 320, "stylesheets": [ALERT_CSS]}
        self.error = pn.pane.Alert("", alert_type="danger", css_classes=["attn-error"], **alert)
        self.notice = pn.pane.Alert("", alert_type="warning", css_classes=["attn-notice"], **alert)
        self.error.jscallback(object=INTO_VIEW, visible=INTO_VIEW)
        self.tabs: pn.Tabs | None = None
        self.view_tabs: Mapping[str, int] = {}
        store.param.watch(self.show, ["error", "errors", "notices"])

    def follow(self, tabs: pn.Tabs, view_tabs: Mapping[str, int]) -> None:
        """Show the errors of the views on the open one of `tabs` ({view: its tab's index})."""
        self.tabs, self.view_tabs = tabs, dict(view_tabs)
        tabs.param.watch(self.show, "active")  # another tab's error goes, this one's comes back

    def show(self, *_events: Any) -> None:
        store = self.store
        active = self.tabs.active if self.tabs is not None else None
        here = [said for view, said in store.errors.items() if self.view_tabs.get(view) == active]
        errors = list(dict.fromkeys(said for said in (store.error, *here) if said))  # two views, one cause: once
        self.error.object = f"<span class='attn-error-text'>{'<br>'.join(map(html.escape, errors))}</span>"
        self.error.visible = bool(errors)
        notices = "<br>".join(html.escape(n) for n in store.notices)
        self.notice.object = f"<span class='attn-notice-text'>{notices}</span>"
        self.notice.visible = bool(store.notices)
