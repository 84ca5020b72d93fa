"""attnlab explorer: type a sentence, read the translation (or parse tree), open every head.

    panel serve apps/explorer.py [--args --checkpoint DIR ... --checkpoint-root DIR ...]   (or: attnlab explore)

The app is `attnlab.app.explorer`; `panel serve` runs this file once per browser session.
"""

from attnlab.app.explorer import app, refusal
from attnlab.app.i18n import DEFAULT, text
from attnlab.app.serve import close_component_route, one_line_refusals

if __name__.startswith("bokeh"):
    close_component_route()  # (from the first session on, for a server started without apps/harden.py)
    one_line_refusals()
    refused = refusal()  # unknown options, or --num-threads: a page that says why, not wrong outputs
    # location=False: no Panel Location, whose reading of the address raised on a crafted number
    # (`?layer=²`, 5,000 digits) before the app ran, leaving a blank page; the app reads and
    # writes its address itself (`attnlab.app.explorer.link`)
    if refused is not None:
        refused.servable(title=text("page.title", DEFAULT), location=False)
    else:
        explorer = app()
        explorer.servable(title=text("page.title", explorer.lang), location=False)
