# From a fresh clone: `make demo` (set up + main job) and `make test` (set up + lint + types + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# A pinned CPU build (this machine serves torch==2.13.0+cpu from local disk; a bare `torch` can pull CUDA).
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck docs pytest conformance conformance-nni conformance-optuna bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q '$(TORCH)'
	$(BIN)/pip install -q -e '.[optuna,nni,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m dnnsat.demo

lint: $(STAMP)
	$(BIN)/ruff check dnnsat tests benchmarks conformance
	$(BIN)/ruff format --check dnnsat tests benchmarks conformance
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy dnnsat

pytest: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck docs pytest

# The documentation site (docs/, mkdocs.yml): --strict fails on a broken link or anchor or a stale API name.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# Every built-in tuner/sampler wrapped: NNI's built-in tuner test procedure and Optuna's own sampler tests
# from the pinned sdist (CI runs both: .ci/run).
conformance: conformance-nni conformance-optuna

conformance-nni: $(STAMP)
	$(BIN)/python -m conformance.nni

conformance-optuna: $(STAMP)
	$(BIN)/python -m conformance.optuna

bench: $(STAMP)
	$(BIN)/python -m benchmarks.solver_perf
	$(BIN)/python -m benchmarks.graph_perf
	$(BIN)/python -m benchmarks.budget_perf
	$(BIN)/python -m benchmarks.optuna_overhead
	$(BIN)/python -m benchmarks.optuna_threads
	$(BIN)/python -m benchmarks.nni_overhead
	$(BIN)/python -m benchmarks.memory_accuracy
	$(BIN)/python -m benchmarks.memory_conv_mixed
	$(BIN)/python -m benchmarks.memory_families
	$(BIN)/python -m benchmarks.memory_mixed
	$(BIN)/python -m benchmarks.fake_memory
	$(BIN)/python -m benchmarks.latency_accuracy
	$(BIN)/python -m benchmarks.nasbench201
	$(BIN)/python -m benchmarks.hpo
	$(BIN)/python -m benchmarks.late_crash
	$(BIN)/python -m benchmarks.model_zoo
	-$(BIN)/python -m benchmarks.gpu_memory  # needs CUDA: says so and fails (ignored) elsewhere

clean:
	rm -rf $(VENV) build *.egg-info
