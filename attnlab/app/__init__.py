"""attnlab.app — the screens: the Panel explorer (`app/explorer/`, served by `panel serve
apps/explorer.py` or `attnlab explore`), the Jupyter widgets (`widgets.py` on `notebook.py`'s
building blocks; the training timeline in `replay.py`), and what both need besides drawing
(`checkpoints.py`: the checkpoint list, one shared read-only model per server, probe snapshots);
`roots.py` is what a served explorer lets visitors open (directories under its checkpoint roots)
and how it names them (never a server path); `i18n.py` looks up every word both screens show, in
English, Spanish and Chinese (the entries: `catalogue.py`), and `words.py` hands the figures theirs
(`attnlab.viz`'s `words=`).

May import: every room but `attnlab.train`. Nothing imports this room. This `__init__` imports
nothing, so that the notebook widgets never pull in Panel and the explorer never ipywidgets.
"""
