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
	  --durations=30

# The suite on a slower, narrower machine than this one, as a newcomer's may be: one core
# (taskset -c KERNEL_CORE, one thread per library) and one test worker, so every item and
# fixture takes as long as it would on a slow 1-core share, and numpy, OpenBLAS, torch and
# oneDNN held to narrower SIMD than this CPU's widest. Two machines, one after the other
# (`make test-kernels KERNEL_MACHINES=avx2` runs one):
#   avx2: numpy without its AVX-512 paths (X86_V4), OpenBLAS's Haswell kernels, torch's AVX2 set
#         (needs a CPU with AVX2: OpenBLAS runs the kernels it is told to)
#   avx:  numpy at its X86_V2 baseline (no AVX2 / FMA), OpenBLAS's Sandybridge kernels,
#         torch's default (non-vector) set, oneDNN and MKL at SSE4
# Emulation is a net: the tests themselves bound every comparison of two computations by float
# rounding, since no emulation covers every CPU.
KERNEL_MACHINES ?= avx2 avx
KERNEL_CORE ?= 0
KERNEL_ENV_avx2 := NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" \
  OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
  MKL_ENABLE_INSTRUCTIONS=AVX2
KERNEL_ENV_avx := NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" \
  OPENBLAS_CORETYPE=Sandybridge ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 \
  MKL_ENABLE_INSTRUCTIONS=SSE4_2
ONE_CORE := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
test-kernels: $(STAMP)
	$(foreach m,$(KERNEL_MACHINES),echo "test-kernels: $(m) on core $(KERNEL_CORE)" && \
	  $(KERNEL_ENV_$(m)) $(ONE_CORE) PATH="$(CURDIR)/$(BIN):$$PATH" \
	  taskset -c $(KERNEL_CORE) $(BIN)/python -m pytest -q -n 1 --dist loadfile --durations=30 &&) true

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

# Each stage's code dep: `write` declares digests/<stage>.txt in dvc.yaml (tools/code_digests.py),
# stage `check` writes it from the stage's imports. After adding a stage or changing imports;
# `dvc status` after it names the stages a code change re-runs.
.PHONY: deps
deps: $(STAMP)
	$(BIN)/python tools/code_digests.py write
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dvc repro check
