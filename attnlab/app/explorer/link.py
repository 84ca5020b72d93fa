"""The page's address as a link to what it shows.

After each run, and each time the open head or tab changes, the browser's address is rewritten
in place (no reload, no entry in the history) to name the model open, the text decoded, the
reference scored, the open tab and the open head: `?checkpoint=`, `?text=`, `?reference=`,
`?view=`, `?kind=`, `?layer=`, `?head=`, and `?weigh=norm` while the Heads tab weighs the maps
by what each key writes; and the search, where it is not the task's: `?greedy=1`, `?beam=`,
`?alpha=` (a link of a greedy run opened at beam 4 and showed another translation). A reload or
a copied link then opens what the page showed: a teacher can send the one head a lesson is about
("cross-attention, layer 5, head 3 on this sentence") rather than steps to reach it. A model opened by path is named by its
root-relative path, which the path box's rules then open (or refuse) again; a text or reference
longer than `CARRIED_CHARS` is left out of the address (a link of megabytes breaks browsers).

A link is a request like any other: what it names that the page does not offer (a layer the
model lacks, a tab by no such name, a crafted value) is said in the notice box, and the page
shows its own choice instead (`follow`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

import panel as pn

from attnlab.app.explorer.store import MAX_BEAM, MAX_INPUT_CHARS, Store
from attnlab.app.i18n import LANGUAGES, kind_name, text
from attnlab.data.tokenizer import is_blank
from attnlab.decode.api import DEFAULTS

CARRIED_CHARS = 2000  # longer texts are not carried in the address
# The tabs by the names a link gives them, in the page's order (`Explorer.tabs`).
VIEWS = ("heads", "equation", "dashboard", "timeline", "ablation", "compare", "corpus", "rollout", "lens")
# The parameters a link may name (`lang` is the interface's, read by `explorer.language`).
NAMED = ("checkpoint", "text", "reference", "lang", "view", "kind", "layer", "head", "weigh", "greedy", "beam", "alpha")
WEIGHED = "norm"  # `?weigh=`'s one value: the Heads tab's maps weighed by ‖αf(x)‖ (`record.norms`)
GREEDY = "1"  # `?greedy=`'s one value: greedy search
SHOWN = 40  # characters of a refused value the notice repeats (a crafted one may be any length)

# In the browser: the box's value is a JSON object of the address's parameters; an empty or too
# long one is taken out of the address, the others set, and parameters it does not name (`lang`)
# are kept.
KEEP = """
const named = JSON.parse(cb_obj.value || "null");
if (named === null) return;
const url = new URL(window.location.href);
for (const [name, value] of Object.entries(named)) {
  if (value === "" || value.length > MAX) url.searchParams.delete(name); else url.searchParams.set(name, value);
}
window.history.replaceState(window.history.state, "", url.toString());
"""


class Address:
    """A hidden box the page sets to what it shows; the browser then writes it into its address
    (`KEEP`), as `carried` and `follow` read it."""

    def __init__(self) -> None:
        self.box = pn.widgets.TextInput(value="", visible=False, css_classes=["attn-address"])
        self.box.jscallback(value=KEEP.replace("MAX", str(CARRIED_CHARS)))

    def keep(self, picked: str, store: Store, tab: int, weighed: bool) -> None:
        """The picker entry `picked` (its directory's name, or the root-relative path of a model
        opened by path), the text and reference `store` decoded, the open head and the tab `tab`,
        and whether the maps are `weighed` by what each key writes."""
        named = {"checkpoint": picked.split(" · ")[-1], "text": store.text, "reference": store.reference}
        head = {"kind": store.kind, "layer": str(store.layer), "head": str(store.head)}
        shown = {**named, "view": VIEWS[tab], **head, "weigh": WEIGHED if weighed else ""}
        self.box.value = json.dumps({**shown, **searched(store)})


def searched(store: Store) -> dict[str, str]:
    """The search the page decodes with, each setting "" where it is the task's (an emptied box
    too): links of the usual search stay as short as they were."""
    task = DEFAULTS.get(getattr(store.model, "task", "translate"), DEFAULTS["translate"])
    beam = "" if store.beam in (None, task["beam"]) else str(store.beam)
    alpha = "" if store.alpha is None or store.alpha == task["alpha"] else f"{store.alpha:g}"
    return {"greedy": GREEDY if store.greedy else "", "beam": beam, "alpha": alpha}


def linked_search(store: Store) -> bool:
    """Set the beam and α the session's link names, where their boxes could hold them (`follow`
    says what they cannot), once the model's opening has set its task's; whether the link asks
    for greedy search."""
    for name in ("beam", "alpha"):
        if (value := linked(name)) is not None:
            setattr(store, name, value)
    return requested("greedy") == GREEDY


def linked(name: str) -> float | None:
    """The link's `?beam=` (a whole number, 1 to MAX_BEAM) or `?alpha=` (0 to 5, as its box takes
    it), None where it names none or one that is not."""
    asked = requested(name)
    if name == "beam":
        return int(asked) if number(asked) and 1 <= int(asked) <= MAX_BEAM else None
    return float(asked) if re.fullmatch(r"\d{1,3}(\.\d{1,6})?", asked) and float(asked) <= 5 else None


def requested(name: str) -> str:
    """The session's `?name=` as text ("" when absent, or outside a server session)."""
    value = ((pn.state.session_args or {}).get(name) or [b""])[0]
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def carried(names: Iterable[str]) -> tuple[list[str], str, str, str]:
    """The picker entries whose directory is the session's `?checkpoint=`, its `?text=` and
    `?reference=` (cut to what the store decodes), and the `?checkpoint=` when no entry is it (a
    path the page opened under a root: "" when there is none)."""
    wanted = requested("checkpoint")
    named = [n for n in names if wanted and n.split(" · ")[-1] == wanted]
    typed, reference = (requested(name)[:MAX_INPUT_CHARS] for name in ("text", "reference"))
    typed = "" if is_blank(typed) else typed  # ("\0\1" showed as "□□" in the box, refused as empty: no page)
    return named, typed, reference, "" if named else wanted


def open_view(store: Store, tabs: pn.Tabs, weigh: pn.widgets.Checkbox) -> None:
    """Open the tab and the head the session's link names (and tick `weigh`, the Heads tab's box,
    when it says `weigh=norm`), before the page is first sent and its
    text decoded, so that the views draw them first: a tab opened in the page's `onload` had Panel
    fetch its loading spinner's stylesheet from its CDN (no explorer may reach the internet), and a
    head opened there sent edits ahead of the figures they edit (`Store.prefer`). What the page
    does not offer is said by `follow`."""
    if (asked := requested("view")) in VIEWS:
        tabs.active = VIEWS.index(asked)
    layer, head = (int(asked) if number(asked := requested(name)) else None for name in ("layer", "head"))
    store.prefer(requested("kind"), layer, head)
    weigh.value = requested("weigh") == WEIGHED


def follow(store: Store, tabs: pn.Tabs, titles: Sequence[str]) -> None:
    """Say, once the link's text is decoded, each value it names that the page does not offer (a
    kind, layer, head or view: `titles` are the tabs' titles, to name the one shown instead)."""
    lang, said = store.lang, []

    def refuse(name: str, asked: str, kept: str) -> None:
        said.append(text("notice.link_refused", lang, name=name, asked=quoted(asked), kept=kept))

    shown = store.checkpoint_name.split(" · ")[-1]  # (a typo in a link showed another model without a word)
    if (asked := requested("checkpoint")) and store.model is not None and asked != shown:
        refuse("checkpoint", asked, shown)
    if (asked := requested("lang")) and asked not in LANGUAGES:
        refuse("lang", asked, LANGUAGES[lang])
    if store.trace is not None:
        if (asked := requested("kind")) and asked != store.kind:
            refuse("kind", asked, kind_name(store.kind, lang))
        words = {"layer": text("selection.layer", lang), "head": text("selection.head", lang)}
        for name, word in words.items():
            if (asked := requested(name)) and not (number(asked) and int(asked) == getattr(store, name)):
                refuse(name, asked, f"{word} {getattr(store, name)}")
    asked = requested("view")
    if asked and asked not in VIEWS:
        refuse("view", asked, titles[tabs.active])
    if (asked := requested("weigh")) and asked != WEIGHED:
        refuse("weigh", asked, text("link.unweighed", lang))
    if (asked := requested("greedy")) and asked != GREEDY:
        refuse("greedy", asked, text("decoding.beam", lang))
    for name in ("beam", "alpha"):
        if (asked := requested(name)) and linked(name) is None:
            refuse(name, asked, f"{name} {getattr(store, name)}")
    for name in NAMED:  # (`?layer=1&layer=2` showed layer 1 without a word)
        if (count := len((pn.state.session_args or {}).get(name) or [])) > 1:
            said.append(text("notice.link_repeated", lang, name=name, count=count, asked=quoted(requested(name))))
    if said:
        store.refuse(*said)


def quoted(asked: str) -> str:
    """A link's value as a notice repeats it: cut to `SHOWN` characters, and what does not print
    spelt as its code (a right-to-left override reversed the notice's line)."""
    cut = asked if len(asked) <= SHOWN else asked[:SHOWN] + "…"
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in cut)


def number(asked: str) -> bool:
    """Whether a link's value is a layer's or a head's number as the address writes them: ASCII
    digits, a few ("1e9999", "nan", "-1" or "²" name none a menu offers; `int` read "١" as 1, and
    raised on "²" or 5,000 digits)."""
    return asked.isascii() and asked.isdigit() and len(asked) <= 6
