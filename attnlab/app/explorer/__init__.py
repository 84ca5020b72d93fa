"""attnlab.app.explorer — the Panel web app: type a sentence, read the translation (or parse
tree), open every head. `store.py` holds one browser session's state (`Store`); each tab and bar
is a small view in its own module that reads the store and draws with `attnlab.viz` (`output`,
`selection`, `heads`, `equation`, `dashboard`, `timeline`, `ablation`, `export`); `page.py` lays
them out, runs the actions and decides when views redraw (`Explorer`, `app`); `boxes.py` and
`screen.py` make its widgets take only what they offer (a crafted message's value is a notice); `startup.py` refuses to
serve as it was not asked (unknown options, a threaded server); `language.py` picks
the session's language (`?lang=`, else the browser's), draws the header's switch and tags the
page with it (`<html lang>`), and every word a view shows, its figures' included
(`Store.words`), comes from `attnlab.app.i18n` in that language. Served by `panel
serve apps/explorer.py` or `attnlab explore`; models are loaded once per server and shared
read-only by all sessions. Everything (bokeh, Panel) comes from this server: no CDN, it works
offline.

May import: `attnlab.app.checkpoints`, `attnlab.app.i18n`, `attnlab.app.words`, `attnlab.viz`, `attnlab.record`,
`attnlab.decode`, `attnlab.data` and `attnlab.errors`; never `attnlab.train`. Views compute nothing of their own:
what they show is in the trace or comes from `attnlab.record` and `attnlab.decode`.
"""

from attnlab.app.explorer.page import Explorer, app
from attnlab.app.explorer.startup import refusal
from attnlab.app.explorer.store import Store

__all__ = ["Explorer", "Store", "app", "refusal"]
