"""What the page shows while the server works on a click: the button spinning and the status
line saying so. Only the button spun before, and the status line went on saying the last run's
"decoded in 247 ms" through the 15 s a long sentence takes to decode: the page looked frozen.
"""

from __future__ import annotations

import html

import panel as pn

from attnlab.app.i18n import text


def working(button: pn.widgets.Button, status: pn.pane.HTML, lang: str) -> None:
    """Spin `button` and add "decoding…" to `status` (the last run's line stays in front of it:
    what says which run is shown changes only once the new one is)."""
    button.loading = True
    status.object = (
        f"{status.object or ''} <span class='attn-busy attn-muted'>{html.escape(text('status.decoding', lang))}</span>"
    )
