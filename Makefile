# The two commands of the README. Both create (once) and reuse .venv at the project root.
#   make explore   set everything up, open the explorer on the bundled checkpoint
#   make test      set everything up, run ruff and the whole test suite (browser + notebooks)
# `torch==2.13.0` is pinned here (a CPU build on these machines); the package itself accepts a range.

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.attnlab-installed
PORT   ?= 5006

.PHONY: setup explore test lint browser

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[app,dev,serve]"
	$(PY) -c "from attnlab.model.kernels import extension; extension()"  # the decoding and dropout kernels, compiled once (~45 s)
	touch $(STAMP)

setup: $(STAMP)

# Debian's Chromium for the browser tests (Playwright's own browser download does not work offline),
# and Debian's CJK fonts, which the views and the PNG export draw Chinese, Japanese and Korean with
# (tests/test_cjk_views.py checks the glyphs are not tofu).
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; fi; }
	@fc-list 2>/dev/null | grep -qi "Noto Sans CJK" || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq fonts-noto-cjk >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq fonts-noto-cjk >/dev/null; fi; }

explore: setup
	$(VENV)/bin/attnlab explore --port $(PORT)

lint: setup
	$(VENV)/bin/ruff check attnlab apps tests benchmarks
	$(VENV)/bin/ruff format --check attnlab apps tests benchmarks

# The suite in one worker process per core (pytest-xdist, at most four): the tests keep to one
# torch thread each (tests/conftest.py), and in one process the suite kept 0.8 of two cores busy.
# 1,301 tests on the 2-core Xeon (2026-12-05): 20 min in one process, 10 min in two; 12 min with
# `--dist loadfile` (one file a worker: the notebooks' file ran alone at the end).
test: setup browser lint
	$(VENV)/bin/pytest -q -n auto --maxprocesses=4 --durations=30
