# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-kernels install lint lock bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Re-install only when the lock or the package metadata changed.
$(STAMP): $(BIN)/python requirements.lock pyproject.toml
	$(BIN)/pip install --quiet -r requirements.lock
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

install: $(STAMP)

# dvc.yaml calls `python stages/...`: put the venv first on PATH for the stages.
run: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro

# Two workers (pytest-xdist), each running whole modules (module fixtures are built once):
# much of the suite waits on subprocesses, so two workers keep this 2-core machine busy.
# `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile \
	  --durations=15

# The suite on other float kernels than this CPU's fastest, as another CPU model would pick:
# torch's oldest kernel set, OpenBLAS's generic x86-64 ones, MKL and oneDNN held to SSE4,
# KERNEL_THREADS threads (`make test-kernels KERNEL_THREADS=2`: other reduction orders).
KERNEL_THREADS ?= 1
KERNEL_ENV := ATEN_CPU_CAPABILITY=default OPENBLAS_CORETYPE=Prescott \
  MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 OMP_NUM_THREADS=$(KERNEL_THREADS)
test-kernels: $(STAMP)
	$(KERNEL_ENV) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -q -n $(TEST_WORKERS) \
	  --dist loadfile --durations=15

lint: $(STAMP)
	$(BIN)/ruff check leakpipe stages tests benchmarks

bench: $(STAMP)
	for b in benchmarks/perf/bench_*.py; do $(BIN)/python $$b || exit 1; done

# Re-resolve requirements.in into the pinned lock (needs the registries).
lock:
	rm -rf /tmp/leakpipe-lock && $(PYTHON) -m venv /tmp/leakpipe-lock
	/tmp/leakpipe-lock/bin/pip install --quiet -r requirements.in
	/tmp/leakpipe-lock/bin/pip freeze --exclude-editable \
	  | sed -E 's/^(torch==[0-9.]+)\+cpu$$/\1/' > requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache

# The MLflow UI on the project's store, bound to 127.0.0.1 (http://127.0.0.1:5000; Ctrl-C stops it).
.PHONY: ui
ui: $(STAMP)
	$(BIN)/leakpipe ui

# Every CUDA code path on this machine's GPU -> benchmarks/results/gpu_check.json (a few minutes;
# without CUDA every check is recorded as skipped and it exits 0).
.PHONY: gpu-check
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/perf/gpu_check.py

# Each stage's code dep: `write` declares digests/<stage>.txt in dvc.yaml (stages/code_digests.py),
# stage `check` writes it from the stage's imports. After adding a stage or changing imports;
# `dvc status` after it names the stages a code change re-runs.
.PHONY: deps
deps: $(STAMP)
	$(BIN)/python stages/code_digests.py write
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro check
