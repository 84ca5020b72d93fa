"""Run by `panel serve --setup apps/harden.py` before the explorer's server starts (`attnlab
explore` passes it): Panel's `/components/...` route then reads modules the server imported
only, instead of importing any installed package a request names, and a browser message Bokeh
refuses, or a page closed while the server wrote to it, is one line in the log, not a traceback
(`attnlab.app.serve`).
"""

from attnlab.app.serve import close_component_route, one_line_closed_pages, one_line_refusals

close_component_route()
one_line_refusals()
one_line_closed_pages()
