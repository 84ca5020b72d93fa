"""What a screen reader and the Tab key need from the page that BokehJS leaves out, set in the
browser on whatever the page draws (BokehJS builds each widget in its own shadow root, and
builds it again when the server redraws it, so a setting made once would be lost: every half
second, and after each key, the page is walked again; a walk takes ~0.4 ms here).

- The tab titles are a tab list (`role=tab`, `aria-selected` on the open one), one stop of the
  Tab key (the open title; ← → move between them, `explorer.keys`), before their content in the
  Tab order: BokehJS appends the titles after the content, so opening a tab from the keyboard
  left its views behind the focus, and nine titles took nine stops (its grid draws them on top).
- A check box is named by its text (BokehJS puts the text beside it, not in a `<label>`: a
  screen reader said "checkbox" of every one); a button of a group says whether it is pressed.
- The number boxes' arrow buttons leave the Tab order (the box's own ↑ ↓ do the same), and so do
  the figures' links to bokeh.org.
- A figure's own Tab stop is named by its title (`role=img`; `viz.cells` also names it by its
  axis, and adds keys to move its hidden columns).
- The status line and the notices are live regions: a result or an error is read out when it
  comes, not only seen.

It adds no widget of its own and sends nothing to the server.
"""

from __future__ import annotations

from typing import Any

from panel.reactive import ReactiveHTML

LIVE = {"attn-status": "polite", "attn-error": "assertive", "attn-notice": "polite"}  # classes: aria-live


class Accessible(ReactiveHTML):
    """An invisible element whose script sets the page's roles and names (one timer, however often
    the element is drawn again)."""

    _template = "<div id='access'></div>"
    _scripts = {
        "render": """
const LIVE = LIVE_CLASSES;
const sweep = (root) => {
  for (const el of root.querySelectorAll("*")) {
    const classes = el.classList;
    if (classes.contains("bk-tab")) {
      el.setAttribute("role", "tab");
      el.setAttribute("aria-selected", String(classes.contains("bk-active")));
      el.tabIndex = classes.contains("bk-active") ? 0 : -1;  // one stop: ← → move between the titles (`keys`)
      el.parentElement.setAttribute("role", "tablist");
      const header = el.parentElement.closest(".bk-header") || el.parentElement;
      const first = [...header.parentNode.children].find((k) => !["STYLE", "LINK"].includes(k.tagName));
      if (first && first !== header) header.parentNode.insertBefore(header, first);  // (the grid keeps it on top)
    } else if (el.tagName === "INPUT" && el.type === "checkbox" && !el.hasAttribute("aria-label")) {
      const text = el.nextElementSibling && el.nextElementSibling.textContent.trim();
      if (text) el.setAttribute("aria-label", text);
    } else if (classes.contains("bk-logo")) {
      el.tabIndex = -1;  // (each figure's link to bokeh.org was a stop of the Tab key)
    } else if (classes.contains("bk-spin-btn")) {
      el.tabIndex = -1;
      el.setAttribute("aria-hidden", "true");
    } else if (el.tagName === "BUTTON" && el.parentElement && el.parentElement.classList.contains("bk-btn-group")) {
      if (el.parentElement.children.length > 1) el.setAttribute("aria-pressed", String(classes.contains("bk-active")));
    }
    for (const [name, live] of Object.entries(LIVE)) {
      if (classes.contains(name) && el.getAttribute("aria-live") !== live) el.setAttribute("aria-live", live);
    }
    if (el.shadowRoot) sweep(el.shadowRoot);
  }
};
const figures = () => {
  if (typeof Bokeh === "undefined" || !Bokeh.index) return;
  for (const view of Bokeh.index.query((v) => v.canvas_view && v.model.title)) {
    const keys = view.canvas_view.events_el, title = (view.model.title.text || "").replace(/\\s+/g, " ");
    // (a figure redrawn in place has a new title; `viz.cells` names those it fits, axis and all)
    if (keys && title && !keys.attnKeys && keys.getAttribute("aria-label") !== title) {
      keys.setAttribute("role", "img");
      keys.setAttribute("aria-label", title);
    }
  }
};
const walk = () => { sweep(document); figures(); };
if (window.attnAccess) { clearInterval(window.attnAccess.timer); document.removeEventListener("keyup", window.attnAccess.walk); }
window.attnAccess = {timer: setInterval(walk, 500), walk: walk};
document.addEventListener("keyup", walk);
walk();
""".replace("LIVE_CLASSES", str(LIVE))
    }

    def __init__(self, **params: Any) -> None:
        super().__init__(width=0, height=0, margin=0, **params)

    def _process_property_change(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Nothing from a browser: the component has no property to set."""
        return {}
