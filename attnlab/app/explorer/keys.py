"""The arrow keys move the open head: ← → the head before or after it in its layer, ↑ ↓ the layer
above or below it in the grid (layer 0 on top), so that a reader can walk through every head of a
kind without aiming at thumbnails, and every view follows as it does a click on the grid.

Keys pressed while typing (a text box, a menu, a number box), on a slider's handle or in a
table's cell are theirs, not the page's, and so are keys with Ctrl, Alt or ⌘; a checkbox just
ticked keeps none (the arrows stopped walking the heads once "mask overlay" was clicked). On a
tab's title, Enter or Space opens that tab and ← → the one beside it, as a tab list does (BokehJS
lets a title take the focus but opens it on a click only: eight of the nine tabs were out of a
keyboard's reach, and ← → moved the head). One tab opens at a time: a title clicked (or keyed) while
the tab opened last is still being drawn waits for it, and of several only the last opens (clicked
quickly, the tabs between were torn down mid-draw, and a tab opened again later stayed blank); the
server says when it has drawn a tab (`ArrowKeys.tab_drawn`). On the language and model menus, closed, no key
chooses (an arrow, Home, End, a page key, a letter): each choice there reloads the page or opens
a model, and one ↓ did so at once; Space, Enter or Alt+↓ open the list. A box's "?" help opens
while the box has the keyboard's focus (it opened under the mouse only).

The browser sends the key's name (with a time stamp, so that the same key twice is two changes);
anything else a crafted message sends is ignored, and the component takes no other property from
a browser.
"""

from __future__ import annotations

from typing import Any

import panel as pn
import param
from panel.reactive import ReactiveHTML

from attnlab.app.explorer.store import Store

# {key: (the selector it moves, the step)}: ↓ goes down the grid, to the next layer
MOVES = {"ArrowLeft": ("head", -1), "ArrowRight": ("head", 1), "ArrowUp": ("layer", -1), "ArrowDown": ("layer", 1)}
ACTING = ("attn-language", "attn-checkpoint", "attn-profile-sentence")  # every choice acts: no key chooses closed
QUIET_MS = 250  # tab keys closer than this open only the last tab chosen (a held key repeats every ~30 ms)
GRACE_MS = 600  # a tab said drawn (`ArrowKeys.tab_drawn`) whose page is this long unchanged is built
SETTLE_MAX_MS = 5000  # another opens at the latest this long after a click (a server that never says so)
SENT_CHARS = 40  # a key's name and a time stamp; a longer message is none the page sends


class ArrowKeys(ReactiveHTML):
    """An invisible element whose script listens to the page's arrow keys (one listener, however
    often the element is drawn again) and sends each as `pressed`: "ArrowLeft 1733480000000"."""

    pressed = param.String(default="", doc="the last arrow key pressed outside a text box, and when")
    drawn = param.Integer(default=0, doc="how many tabs the server has drawn on opening (`tab_drawn`)")

    _template = "<div id='keys'></div>"
    _scripts = {
        "render": """
const typing = (e) => {
  const target = e.composedPath()[0];  // inside a widget's shadow root, not its host
  // (a table's cell: its arrows move between the cells; a ticked box keeps no arrow for itself)
  const box = target && target.tagName === "INPUT" && target.type === "checkbox";
  return target && !box && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName)
    || Boolean(target.closest && target.closest(".slick-cell, [role=slider], .noUi-handle")));
};
const titles = (root, found = []) => {  // every tab title, through the widgets' shadow roots
  for (const el of root.querySelectorAll("*")) {
    if (el.classList.contains("bk-tab")) found.push(el);
    if (el.shadowRoot) titles(el.shadowRoot, found);
  }
  return found;
};
// The server draws the tabs again once one opens, and the focus fell to the page: it goes back to
// the title opened, for up to ten seconds (a redraw under load took more than the two it waited,
// and the keys pressed meanwhile were lost), unless something else has taken it meanwhile. A key pressed
// meanwhile (quick → → →) steps from the title the last key chose (`wanted`), not from the one
// focused or drawn before it: three quick ← moved one tab. Keys less than QUIET_MS ms apart open
// only the last one chosen: each tab between was built and torn down while BokehJS was still drawing
// it, and under load its table and figures threw errors ("SlickGrid Cannot find stylesheet").
let pending = null, wanted = null, opening = null;  // {until}: keys quicker than the redraw; the title chosen; the timer
const refocus = (title, tries) => {
  if (title !== wanted) return;  // (a later key opened another: the earlier one's turn is over)
  const now = titles(document).find((t) => t.textContent === title);
  if (now && document.activeElement === document.body) {
    now.focus();
    pending = null;
  }
  if (tries > 0) setTimeout(() => refocus(title, tries - 1), 100);
};
const tabbed = (e) => {  // a key on a tab's title: open it, or the one beside it; true when it was one
  const target = e.composedPath()[0];
  const quick = pending !== null && Date.now() < pending.until;
  let tab = target && target.closest && target.closest(".bk-tab");
  if (!tab && target === document.body && quick) tab = titles(document).find((t) => t.textContent === wanted);
  const step = {ArrowLeft: -1, ArrowRight: 1, Enter: 0, " ": 0}[e.key];
  if (!tab || step === undefined) return false;
  e.preventDefault();
  const row = [...tab.parentElement.querySelectorAll(".bk-tab")].map((t) => t.textContent);
  const title = row[row.indexOf(quick ? wanted : tab.textContent) + step];
  if (title && titles(document).some((t) => t.textContent === title)) {
    pending = {until: Date.now() + 10000};
    wanted = title;
    clearTimeout(opening);
    opening = setTimeout(() => {
      const next = titles(document).find((t) => t.textContent === wanted);  // (drawn now, not the stale one)
      if (next) next.click();
      refocus(wanted, 100);
    }, QUIET_MS);
  }
  return true;
};
// One tab opens at a time: a click on a title while the tab opened last is being drawn (until the
// server says it has drawn it, `drawn`, and BokehJS has added no element for GRACE_MS ms since) waits
// for it, and of several such clicks only the last is carried out. Clicked quickly one after another,
// the dynamic tabs were built and torn down mid-draw: BokehJS threw ("top_panel", "SlickGrid Cannot
// find stylesheet") and a tab opened again later stayed blank (the dashboard, opened 250 ms after its
// titles were drawn, its table still being built). The keys above open their tab by a click too.
let drawing = false, queued = null, drawn = null;  // a tab is being drawn; the title clicked meanwhile; when said drawn
window.attnTabDrawn = () => { if (drawing) drawn = Date.now(); };
const elements = (root) => {  // how many the page has, through the widgets' shadow roots
  let n = 0;
  for (const el of root.querySelectorAll("*")) n += 1 + (el.shadowRoot ? elements(el.shadowRoot) : 0);
  return n;
};
const settle = (since, seen = -1, still = 0) => {  // still: since when the page has had `seen` elements
  const now = Date.now(), n = elements(document);
  if (n !== seen) [seen, still] = [n, now];
  if ((drawn === null || now - Math.max(drawn, still) < GRACE_MS) && now - since < SETTLE_MAX_MS) {
    setTimeout(() => settle(since, seen, still), 50);
    return;
  }
  drawing = false;
  const next = queued && titles(document).find((t) => t.textContent === queued);
  queued = null;
  if (next) next.click();
};
if (window.attnTabClicks) document.removeEventListener("click", window.attnTabClicks, true);
window.attnTabClicks = (e) => {
  const target = e.composedPath()[0];
  const tab = target && target.closest && target.closest(".bk-tab");
  if (!tab) return;
  if (drawing) {
    e.stopImmediatePropagation();
    e.preventDefault();
    queued = tab.textContent;
  } else if (!tab.classList.contains("bk-active")) {  // (the open one's title: nothing is drawn again)
    drawing = true;
    drawn = null;
    settle(Date.now());
  }
};
document.addEventListener("click", window.attnTabClicks, true);
// The language and model menus act on every choice (a reload, a model opened): an arrow, Home,
// End, a page key or a letter on one of them, closed, chose another language or model at once;
// it opens with Space, Enter or Alt+↓, and its list takes them all.
const acting = (e) => e.composedPath().some((el) => el.classList && ACTING.some((c) => el.classList.contains(c)));
const choosing = (e) => MOVES.includes(e.key) || ["Home", "End", "PageUp", "PageDown"].includes(e.key)
  || (e.key.length === 1 && e.key !== " ");
if (window.attnArrowKeys) document.removeEventListener("keydown", window.attnArrowKeys);
window.attnArrowKeys = (e) => {
  if (!e.altKey && !e.ctrlKey && !e.metaKey && choosing(e) && acting(e)) { e.preventDefault(); return; }
  if (e.ctrlKey || e.metaKey || e.altKey || tabbed(e) || typing(e) || !MOVES.includes(e.key)) return;
  e.preventDefault();  // (the page would scroll)
  data.pressed = e.key + " " + Date.now();
};
document.addEventListener("keydown", window.attnArrowKeys);
// A box's "?" help (BokehJS's description icon) opened under the mouse only: it opens while the
// box has the keyboard's focus and closes when the focus leaves, or on Escape (WCAG 1.4.13). Focus
// moving inside one shadow tree (the inputs' column) sends no focus event to the document, so each
// key's release looks where the focus is now.
let helped = null;  // the icon whose help the keyboard opened; Escape closes it until the focus leaves
// A table is one stop of the Tab key: Tab and Shift+Tab leave it (SlickGrid walked its cells, each
// one reached selecting its row: in the Corpus tab that opened a sentence over the text typed), and
// the corpus's sentences take no key at all (its menu opens one from the keyboard).
if (window.attnTableKeys) window.removeEventListener("keydown", window.attnTableKeys, true);
window.attnTableKeys = (e) => {
  const path = e.composedPath(), has = (name) => path.some((el) => el.classList && el.classList.contains(name));
  if (has("bk-data-table") && (e.key === "Tab" || has("attn-profile-sentences"))) e.stopPropagation();
};
window.addEventListener("keydown", window.attnTableKeys, true);
if (window.attnHelpKeys) document.removeEventListener("keyup", window.attnHelpKeys);
window.attnHelpKeys = (e) => {
  let at = document.activeElement;
  while (at && at.shadowRoot && at.shadowRoot.activeElement) at = at.shadowRoot.activeElement;
  const root = at && at.getRootNode();
  const icon = root && root !== document ? root.querySelector(".bk-description") : null;
  if (e.key === "Escape" && helped) helped.dispatchEvent(new MouseEvent("mouseleave"));
  if (e.key === "Escape" || icon === helped) return;
  if (helped) helped.dispatchEvent(new MouseEvent("mouseleave"));
  helped = icon;
  if (icon) icon.dispatchEvent(new MouseEvent("mouseenter"));
};
document.addEventListener("keyup", window.attnHelpKeys);
""".replace("MOVES", str(list(MOVES)))
        .replace("ACTING", str(list(ACTING)))
        .replace("QUIET_MS", str(QUIET_MS))
        .replace("SETTLE_MAX_MS", str(SETTLE_MAX_MS))
        .replace("GRACE_MS", str(GRACE_MS)),
        "drawn": "if (window.attnTabDrawn) window.attnTabDrawn();",
    }

    def __init__(self, store: Store, **params: Any) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
        self.param.watch(lambda event: move(store, event.new.split(" ")[0]), "pressed")

    def tab_drawn(self) -> None:
        """Say that the tab opened is drawn: in a server session after the edits queued for the
        next tick (`heads.bokeh_edit`), so that the browser hears it after every change of the draw."""
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(lambda: setattr(self, "drawn", self.drawn + 1))
        else:
            self.drawn += 1

    def _process_property_change(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Only `pressed`, as a short string, from a browser."""
        msg = super()._process_property_change(msg)
        sent = msg.get("pressed")
        return {"pressed": sent} if isinstance(sent, str) and len(sent) <= SENT_CHARS else {}


def move(store: Store, key: str) -> None:
    """Open the head `key` (one of `MOVES`) points to from the open one, if there is one: the
    first and last heads and layers stay where they are (no wrapping round to the other end)."""
    if key not in MOVES or store.trace is None:
        return
    name, step = MOVES[key]
    offered = list(store.param[name].objects)
    now = offered.index(getattr(store, name))
    if 0 <= now + step < len(offered):
        store.select(**{name: offered[now + step]})
