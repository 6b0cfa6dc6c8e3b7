# Quick start:  make demo   (set up, then scan + index + pack + report on a copy of sample_data)
#               make test   (set up, then run the test suite)
VENV ?= .venv
# A second venv for what needs torchvision: the torchvision loader profile, Mosaic MDS and litdata (both
# import torchvision). PyPI's torchvision is not built for the CPU torch 2.13.0 above; torch 2.14.1 with
# torchvision 0.29.1 is a matching pair these machines have on disk (a CUDA build that runs on the CPU).
TVENV ?= .venv-torchvision
PY := $(VENV)/bin/python
DSCLEAN := $(VENV)/bin/dsclean

# Azurite (Microsoft's Azure Storage emulator, an npm package) for the az:// tests: the version pinned in
# tests/support/azurite/package-lock.json, installed here by `npm ci` (node and npm from the system)
AZURITE ?= .cache/azurite

.PHONY: setup demo test lint docs bench clean

setup: $(VENV)/.installed $(TVENV)/.installed $(AZURITE)/.installed

# torch first, pinned: 2.13.0 is a CPU build these machines have on disk, while an
# unpinned torch pulls a multi-GB CUDA build. The package itself asks for torch>=2.1.
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,plot,dask,heif,jxl,opencv,av,tiff,stateful,docs,lint,s3]'
	touch $@

$(TVENV)/.installed: pyproject.toml Makefile  # Makefile: its package list is here
	python3 -m venv $(TVENV)
	$(TVENV)/bin/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(TVENV)/bin/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1 -e '.[s3,mds,litdata]' pytest webdataset 'moto[server,s3]>=5'
	# Dask (the MDS-on-Dask test) in a step of its own, pinned: resolved together with the set above, pip
	# backtracked through every distributed release for over ten minutes
	$(TVENV)/bin/python -m pip install --quiet 'dask[distributed]==2026.8.0'
	touch $@

# Without npm the az:// tests are skipped saying so (and fail under CI=true, where they must run).
$(AZURITE)/.installed: tests/support/azurite/package.json tests/support/azurite/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(AZURITE) && cp tests/support/azurite/package.json tests/support/azurite/package-lock.json $(AZURITE)/ && \
		cd $(AZURITE) && npm ci --no-audit --no-fund --loglevel=error && touch .installed; \
	else echo "note: npm is missing: Azurite is not installed and the az:// tests will be skipped" >&2; fi

# The demo works on a copy: the repo's own sample_data is never moved, and dsclean's own
# state (last-scan pointers, scan cache) goes to demo/state instead of ~/.cache/dsclean.
demo: export DSCLEAN_STATE_DIR = $(CURDIR)/demo/state
demo: setup
	rm -rf demo && mkdir demo && cp -r sample_data demo/data
	$(DSCLEAN) scan demo/data/images --quarantine demo/quarantine/images --html demo/report-images.html
	$(DSCLEAN) index demo/data/images -o demo/images.arrow
	$(DSCLEAN) scan demo/data/audio --quarantine demo/quarantine/audio
	$(DSCLEAN) index demo/data/audio -o demo/audio.arrow
	$(DSCLEAN) status demo/quarantine/images
	$(DSCLEAN) report demo/data/audio -o demo/report-audio.html
	$(DSCLEAN) info demo/images.arrow
	$(DSCLEAN) pack demo/images.arrow -o demo/shards --samples-per-shard 10
	$(DSCLEAN) verify demo/shards
	$(PY) -c "from dsclean import IndexedDataset; ds = IndexedDataset('demo/images.arrow'); \
	img, label = ds[0]; print(f'IndexedDataset: {len(ds)} samples, classes {ds.classes}; sample 0: {ds.path(0)} {img.size} label {label}')"

# Two runs: the suite in the main venv, every test (the ones marked slow too: `pytest -m "not slow"` is the
# developer's fast loop, CONTRIBUTING.md; one run, not two, to collect the suite once), then the tests that need
# torchvision (the torchvision loader profile, Mosaic MDS, litdata) in the second venv.
# PYTEST_ARGS passes options to the first run (`make test PYTEST_ARGS="-n 2"` where pytest-xdist is installed).
PYTEST_ARGS ?=
test: setup
	$(VENV)/bin/pytest -q --ignore=tests/with_torchvision $(PYTEST_ARGS)
	$(TVENV)/bin/pytest -q tests/with_torchvision

# ruff (lint + format) and mypy as configured in pyproject.toml (rules deferred there are listed with their counts)
lint: setup
	$(VENV)/bin/ruff check dsclean tests scripts docs/hooks.py
	$(VENV)/bin/ruff format --check dsclean tests scripts docs/hooks.py
	$(VENV)/bin/mypy dsclean

# the docs site into site/ (gitignored); --strict turns every warning (a broken link, a missing page) into an error
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir site

bench: setup
	$(PY) scripts/bench_scan.py
	$(PY) scripts/bench_report.py

clean:
	rm -rf demo site $(VENV) $(TVENV) $(AZURITE)
