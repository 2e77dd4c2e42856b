# Two commands set up everything on a machine that has only Python and pip:
#   make demo   runs the digits HPO study (SQLite storage, local workers, bundled data)
#   make test   runs the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test venv bench clean gpu-check

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: here it resolves to the ready CPU build, never the CUDA wheels.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# Runs the study afresh each time (--replace); a killed demo continues with
# `.venv/bin/hypersack resume digits`.
demo: $(STAMP)
	$(BIN)/hypersack run examples/digits.yaml --replace
	$(BIN)/hypersack best digits --json

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

# Every GPU path and the headline figures (README "GPU check"); needs a CUDA build of torch.
# GPU_FLAGS=--quick for the short run; results in $(GPU_OUT) and benchmarks/results/.
GPU_OUT ?= gpu-check-results
GPU_FLAGS ?=
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_suite.py --out $(GPU_OUT) --save-results $(GPU_FLAGS)

clean:
	rm -rf $(VENV) hypersack.db hypersack.db-wal hypersack.db-shm hypersack-runs
