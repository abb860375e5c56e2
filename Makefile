# Two commands for a fresh machine: `make demo` and `make test`. Each bootstraps .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# This machine has a local CPU wheel of torch 2.13.0; an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint typecheck bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_PIN)" -e ".[mlx,torch,postgres,serve,dev]"
	touch $(STAMP)

# On Linux, MLX's CPU backend runs on Debian's OpenBLAS when present (25x faster prefill than
# the wheel's reference BLAS); `make test` installs it first (root, apt). See workers/blas.py.
BLAS_ENV = $$($(BIN)/python -m specfleet.workers.blas $(1))

demo: venv
	$(BIN)/specfleet models fetch smollm2-135m
	mkdir -p reports
	bash -o pipefail -c 'env $(call BLAS_ENV) $(BIN)/specfleet matrix run demo --report-dir reports | tee reports/.demo-run.txt'
	@id=$$(sed -n 's/^matrix id: //p' reports/.demo-run.txt); \
	  echo "browse it: $(BIN)/specfleet serve --matrix $$id   (then open http://127.0.0.1:8266/matrices/$$id)"

test: venv
	env $(call BLAS_ENV,--install) $(BIN)/python -m pytest -q

# ruff, then mypy over specfleet/ (configured in pyproject.toml).
lint: venv
	$(BIN)/ruff check specfleet tests bench tools
	$(BIN)/mypy

typecheck: venv
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
