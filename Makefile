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
	$(BIN)/tensorledger account --model gpt2 --batch 8 --seq 1024 --hardware h100 --count 8 --tokens 10B
	$(BIN)/tensorledger time --params 70B --tokens 15T --hardware h100 --count 1024 --mfu 0.5
	$(BIN)/tensorledger fit --hardware h100 --count 8 --optimizer adamw --precision bf16-fp32-states
	$(BIN)/tensorledger quantize --schemes nvfp4,mxfp4,mxfp8,fp8 --shape 1024x1024 --seed 0

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest

bench: $(STAMP)
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
