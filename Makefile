# Set-up and the main entry points. Every target creates .venv when it is missing.
# torch==2.13.0 is pinned in the install step so pip takes the CPU wheel and never a CUDA build.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "torch==2.13.0"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# the main job: the whole ledger of gpt2 training in mixed bf16 on H100s; then napkin answers
# and fp4 against fp8
demo: $(STAMP)
	$(BIN)/tensorledger account --model gpt2 --batch 8 --seq 1024 --hardware h100 --count 8 --tokens 10B --html gpt2-ledger.html
	$(BIN)/tensorledger time --params 70B --tokens 15T --hardware h100 --count 1024 --mfu 0.5
	$(BIN)/tensorledger fit --hardware h100 --count 8 --optimizer adamw --precision bf16-fp32-states
	$(BIN)/tensorledger quantize --schemes nvfp4,mxfp4,mxfp8,fp8 --shape 1024x1024 --seed 0

# One OpenMP thread a pytest worker: two workers on two cores, each with a thread team the
# size of the machine, spin at each other's barriers (tests/bench and tests/ledger, two runs
# beside a mutation run: 236 CPU seconds, 186 with one thread).  The torchrun tests set one
# thread a rank already; the probe's own process (bench.probe_apart) inherits the one thread.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadfile

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# Mutation testing of every package that computes a figure (see [tool.mutmut] in pyproject.toml
# for the list and for what is left out: presentation, cli, bench): slow, so not part of `test`
# nor of CI.  `make mutation` runs them all; `make mutation-changed BASE=<ref>` only the
# functions changed since BASE (scripts/mutation_changed.py), which each issue touching the core
# runs before it closes.  mutmut is installed here, into the venv, not through the dev extra.
# Results are cached in mutants/ (only changed functions rerun); remove it for a fresh run.
MUTMUT_VERSION := 3.8.1
MUTATION_JOBS ?= 2
# One OpenMP thread: mutmut forks each mutant's worker from a process that has run tests, and a
# fork keeps only the calling thread, so a worker entering torch's thread pool would wait for the
# pool's missing threads until the wall-clock timer killed it as a "timeout" (tests/conftest.py
# sets one torch thread under mutmut too).  `env`, so that xargs runs it too.
MUTMUT := env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/mutmut

.PHONY: mutation mutation-changed
mutation: $(STAMP)
	$(BIN)/python -m pip install -q "mutmut==$(MUTMUT_VERSION)"
	$(MUTMUT) run --max-children $(MUTATION_JOBS)
	$(BIN)/mutmut export-cicd-stats
	@$(BIN)/python -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
	tested = s["total"] - s["skipped"]; killed = s["killed"]; timeouts = s["timeout"]; \
	print(f"mutation score: {killed} of {tested} mutants killed = {100 * killed / tested:.1f}% " \
	f"({timeouts} timeouts, not counted: check them by hand)", s)'
	@$(BIN)/python scripts/mutation_score.py
	@echo "mutants not killed (survived, no tests, suspicious):"
	@$(BIN)/mutmut results
	@for m in $$($(BIN)/mutmut results | awk -F': ' '$$2 == "survived" {print $$1}'); do \
		$(BIN)/mutmut show $$m; done

BASE ?= main
mutation-changed: $(STAMP)
	$(BIN)/python -m pip install -q "mutmut==$(MUTMUT_VERSION)"
	@globs="$$($(BIN)/python scripts/mutation_changed.py $(BASE))"; \
	if [ -z "$$globs" ]; then echo "no function of the mutated packages changed since $(BASE)"; \
	else echo "$$globs" | tr '\n' '\0' | xargs -0 $(MUTMUT) run --max-children $(MUTATION_JOBS); \
	$(BIN)/mutmut results; fi
