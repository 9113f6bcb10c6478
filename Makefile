# Two commands matter: `make demo` and `make test`. Both create .venv and install first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean setup docs

$(STAMP): pyproject.toml setup.py $(wildcard ampsclient/_speedups_src/*.c ampsclient/_speedups_src/*.h) \
		ampsclient_server_stub/_speedups.c ampsclient_server_stub/queues/_queue_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# zlib's header for the server's C speedups (journal CRCs); Debian's python images have it
	-test -f /usr/include/zlib.h || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zlib1g-dev; }
	$(PY) -m pip install -q -e '.[dev,spark,docs]'
	@# the official client is a black-box test peer only (interop tests skip without it)
	-$(PY) -m pip install -q amps-python-client
	-command -v npm >/dev/null && cd tests/interop/js && npm install --no-audit --no-fund --silent
	@# Debian's chromium for the admin dashboard test (Playwright drives it; no browser download)
	-command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) examples/worker_grid/runner.py --mode both

# every process of a run (pytest, its workers, the servers and tools they start) reads and writes
# bytecode in one cache in the venv, kept across passes and runs (the tree gets no __pycache__):
# with PYTHONDONTWRITEBYTECODE, set on some machines, each of them compiled (and pytest rewrote)
# everything it imported again; collecting the whole suite took 12.9 s of CPU instead of 3.4 s
PYCACHE := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache
PYTEST := $(PYCACHE) $(PY) -m pytest -p no:cacheprovider
# two workers (pytest-xdist), then the tests marked serial (they assert on time) one at a time
PARALLEL := -n 2 --dist worksteal -m "not serial"
PURE_SUITES := tests/client tests/ha tests/stores tests/protocol tests/fuzz tests/test_speedups.py
# the serial passes collect only the files with serial tests (tests/test_serial_files.py checks
# that the list names every one); the pure-Python one those of them in PURE_SUITES
SERIAL_FILES = $(shell cat tests/serial_files.txt)
PURE_SERIAL_FILES = $(filter $(PURE_SUITES:%=%/%) $(PURE_SUITES),$(SERIAL_FILES))
COV := --cov --cov-append --cov-report=

.PHONY: coverage

# the whole suite; then the pure-Python code the C speedups replace, on the suites that run
# through it. `make coverage` runs the same with coverage measured (about 1.6x slower).
test: $(STAMP)
	AMPSCLIENT_REQUIRE_SPEEDUPS=1 $(PYTEST) $(TESTFLAGS) $(PARALLEL)
	AMPSCLIENT_REQUIRE_SPEEDUPS=1 $(PYTEST) $(TESTFLAGS) -m serial $(SERIAL_FILES)
	AMPSCLIENT_PUREPYTHON=1 $(PYTEST) $(TESTFLAGS) -q $(PARALLEL) $(PURE_SUITES)
	AMPSCLIENT_PUREPYTHON=1 $(PYTEST) $(TESTFLAGS) -q -m serial $(PURE_SERIAL_FILES)

coverage: $(STAMP)
	$(PY) -m coverage erase
	@# coverage of the library (branches too, server processes included; pyproject [tool.coverage])
	$(MAKE) --no-print-directory test TESTFLAGS="$(COV)"
	$(PY) -m coverage report

docs: $(STAMP)
	@# the site (mkdocs.yml) into site/; --strict: a broken link or API reference fails the build
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check ampsclient ampsclient_server_stub tests benchmarks examples
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m pytest benchmarks --benchmark-only -p no:cacheprovider
	$(PY) benchmarks/publish_vs_official.py

clean:
	rm -rf $(VENV) build dist site *.egg-info ampsclient/*.so .pytest_cache .mypy_cache .ruff_cache .hypothesis .benchmarks
