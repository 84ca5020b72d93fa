"""attnlab explorer: type a sentence, read the translation (or parse tree), open every head.

    panel serve apps/explorer.py [--args --checkpoint DIR ... --checkpoint-root DIR ...]   (or: attnlab explore)

The app is `attnlab.app.explorer`; `panel serve` runs this file once per browser session.
"""

from attnlab.app.explorer import app, threaded_refusal
from attnlab.app.i18n import DEFAULT, text

if __name__.startswith("bokeh"):
    refusal = threaded_refusal()  # served with --num-threads: a page that says why, not wrong outputs
    if refusal is not None:
        refusal.servable(title=text("page.title", DEFAULT))
    else:
        explorer = app()
        explorer.servable(title=text("page.title", explorer.lang))
