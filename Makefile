# The two commands: `make demo` (the seed 001 depth study) and `make test` (the whole suite; CI runs this).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch: the CPU build where the machine offers it (a local wheel here); the project's range admits it.
TORCH_PIN ?= torch==2.13.0
# pytest keeps the modules it rewrites (the tests' assertions, and all of Hypothesis, whose distribution holds a pytest
# plugin) as bytecode; with PYTHONDONTWRITEBYTECODE set it rewrites them again in every process: 5.8 s for Hypothesis
# alone in each xdist worker on the loaded 2-core machine, 0.7 s once kept. (mutation/ sets it for its own test runs.)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint docs install install-test clean chromium mutants breakages

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_PIN)" || $(BIN)/pip install -q "torch>=2.3,<3"

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q -e ".[test,docs]"

demo: install
	$(BIN)/depthlab reproduce seed001-depth --scale quick

lint: install-test
	$(BIN)/ruff check src tests benchmarks mutation docs

# Debian's Chromium for tests/test_report_browser.py (Playwright drives it; never `playwright install`).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO=sudo; \
	  else echo "chromium is missing and cannot be installed here: the browser test will be skipped"; exit 0; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# The documentation site into site/, offline (no fonts, scripts or inventories fetched); --strict: a broken link,
# a missing page or a docstring mkdocstrings cannot read fails the build.
docs: install
	$(BIN)/pip install -q -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: install-test chromium
	$(BIN)/ruff check src tests benchmarks mutation docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The fast tier (tests/conftest.py FAST): the guards of the flagship guarantees, under a minute of 2 cores.
test-fast: install-test
	$(BIN)/python -m pytest -m fast -n 2 --dist loadfile

# Mutation testing of the engine, the optimizer, checkpoints, data, the attention kernel and the constructions (not in
# CI: hours for all of them). Each mutant runs the tests that reach its line (coverage); a stopped run resumes.
# `make mutants ARGS="--only optim --time 1800"` for one module and half an hour. docs/reliability/testing.md.
mutants: install-test
	$(BIN)/pip install -q -e ".[mutation]"
	$(BIN)/python mutation/run.py $(ARGS)

# The fifteen deliberate breakages of issues 34 and 44, each in a scratch copy: the fast tier must catch every one.
breakages: install-test
	$(BIN)/python mutation/breakages.py $(ARGS)

clean:
	rm -rf $(VENV) depthlab-runs .pytest_cache site
