# Two commands set up everything on a machine that has only Python and pip:
#   make demo   runs the digits HPO study (SQLite storage, local workers, bundled data)
#   make test   runs the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bytecode test-integrations integration-extras venv bench clean gpu-check browser upgrade-deps docs-screenshot docs

# Every install takes the versions the suite last passed with (constraints.txt, written by
# `make upgrade-deps`), so a new upstream release never changes what a fresh clone installs.
# CONSTRAINTS= (empty) installs the newest releases the ranges in pyproject.toml allow.
CONSTRAINTS ?= constraints.txt
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))

# Test processes (pytest-xdist); a test file stays in one process. 2 matches CI's two cores.
TEST_WORKERS ?= 2

# pip's own progress is shown (a first install takes minutes: torch alone is large);
# --no-warn-script-location and --disable-pip-version-check only trim noise.
PIP := $(BIN)/pip install --disable-pip-version-check --no-warn-script-location

$(STAMP): pyproject.toml Makefile $(CONSTRAINTS)
	@echo "==> [1/3] creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] installing torch==2.13.0 (pinned: here the ready CPU build, never the CUDA wheels; the longest step)"
	$(PIP) $(PIN) torch==2.13.0
	@echo "==> [3/3] installing hypersack and its dependencies (-e .[dev], pinned by $(or $(CONSTRAINTS),nothing))"
	$(PIP) $(PIN) -e ".[dev]"
	@echo "==> compiling the placement kernels once (numba caches them; ~40 s of CPU)"
	$(BIN)/python -m hypersack.placement.warm
	@$(MAKE) --no-print-directory browser
	touch $(STAMP)
	@echo "==> $(VENV) is ready"

venv: $(STAMP)

# The browser tests drive the system's Chromium (playwright comes with the test extra; it never
# downloads a browser of its own). Installed with apt-get where it is missing and apt is usable
# (as root, or with password-less sudo); otherwise those tests are skipped with the reason.
browser:
	@if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then \
		echo "==> chromium found: $$(command -v chromium || echo /usr/bin/chromium)"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
		echo "==> no chromium and no apt-get: the browser tests will be skipped"; \
	else \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
		echo "==> installing chromium (apt-get) for the browser tests"; \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium ) \
			|| echo "==> chromium could not be installed: the browser tests will be skipped"; \
	fi

# Runs the study afresh each time (--replace); a killed demo continues with
# `.venv/bin/hypersack resume digits`.
demo: $(STAMP) bytecode
	@echo "==> running examples/digits.yaml (32 trials; workers first import torch, then report each epoch)"
	$(BIN)/hypersack run examples/digits.yaml --replace
	$(BIN)/hypersack best digits --json
	$(BIN)/hypersack report digits -o digits-report.html

# The documentation site, built offline from docs/ into site/ (open site/index.html): first the
# coverage check (every public name documented, every page in the nav: tools/docs_check.py), then
# MkDocs in strict mode (a broken link or anchor fails). Reference pages are generated from the
# code when it builds (tools/docs_hooks.py).
docs: $(STAMP)
	$(BIN)/python tools/docs_check.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet -d site

# docs/report.png, the README's picture: the demo study run afresh in a temporary folder, its
# report photographed in the system's headless Chromium (tools/docs_screenshot.py).
docs-screenshot: $(STAMP) browser
	$(BIN)/python tools/docs_screenshot.py --out docs/report.png

# Compiles the project's own modules to bytecode (~1 s), as pip does for a package it installs
# (an editable install is not compiled). Every process the suite or a study starts (workers, CLI
# runs, check scripts) then loads them instead of compiling them from source, where the
# environment says not to write bytecode (PYTHONDONTWRITEBYTECODE): ~0.1-0.4 s of CPU per
# process (RESULTS.md, "Stop 35"). Stale files are harmless: Python checks each one's source.
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 hypersack tests examples benchmarks tools

# mypy first (configured in pyproject.toml: the whole hypersack package), then the tests.
test: $(STAMP) browser bytecode
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The Lightning and Hugging Face integrations' own tests: their extras installed (pinned), then
# the tests that need them. They stay out of `make test`'s venv: importing lightning or the
# transformers Trainer costs ~10 s of CPU in every process that does it (RESULTS.md, "integrations"),
# which the 5-minute suite cannot carry; without the extras those tests skip, naming the extra.
test-integrations: integration-extras
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests/test_integration_lightning.py \
		tests/test_integration_huggingface.py tests/test_readme_integrations.py tests/test_integrations.py

integration-extras: $(STAMP)
	$(PIP) $(PIN) -e ".[dev,lightning,huggingface]"

# Refreshes constraints.txt: a new venv with the newest releases pyproject.toml allows (torch stays
# 2.13.0), their versions written down, then the whole suite on them. Commit constraints.txt only
# if the suite passed.
upgrade-deps:
	rm -rf $(VENV)
	$(MAKE) --no-print-directory venv CONSTRAINTS=
	$(MAKE) --no-print-directory integration-extras CONSTRAINTS=
	@echo "# The versions the suite last passed with; written by \`make upgrade-deps\`." > constraints.txt
	$(BIN)/pip freeze --exclude-editable --disable-pip-version-check \
		| grep -v '^hypersack' | sed -E 's/^(torch==[^+]*)[+].*/\1/' >> constraints.txt
	touch $(STAMP)
	$(MAKE) --no-print-directory test

bench: $(STAMP)
	$(BIN)/python benchmarks/driver/overhead.py

# Every GPU path and the headline figures (README "GPU check"); needs a CUDA build of torch.
# GPU_FLAGS=--quick for the short run; results in $(GPU_OUT) and benchmarks/results/.
GPU_OUT ?= gpu-check-results
GPU_FLAGS ?=
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu/gpu_suite.py --out $(GPU_OUT) --save-results $(GPU_FLAGS)

clean:
	rm -rf $(VENV) hypersack.db hypersack.db-wal hypersack.db-shm hypersack-runs digits-report.html
