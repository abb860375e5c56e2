# Two commands for a fresh machine: `make demo` and `make test`. Each bootstraps .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# This machine has a local CPU wheel of torch 2.13.0; an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN ?= torch==2.13.0
# The tested versions of the libraries whose internals specfleet uses (constraints.txt says
# why); `make test CONSTRAINTS=` in a fresh clone installs the newest instead.
CONSTRAINTS ?= constraints.txt
PIP_CONSTRAINTS := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
STAMP := $(VENV)/.installed
# pip would compile every installed file to bytecode (~80 s of the install, mostly torch files
# nothing imports); instead a module is compiled on its first import and cached. An empty value
# turns off a PYTHONDONTWRITEBYTECODE the environment may set, which would forbid that cache.
export PYTHONDONTWRITEBYTECODE :=

.PHONY: venv demo test test-fast lint typecheck bench clean device-wheels

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile $(PIP_CONSTRAINTS) "$(TORCH_PIN)" -e ".[mlx,torch,postgres,serve,dev]"
	touch $(STAMP)

# The llama.cpp peers' package, for `make test` only (the demo does not run it): pip builds
# llama.cpp from the sdist (~3 min on 2 cores, then pip's wheel cache). On x86-64 the kernels
# are AVX2 and not -march=native: this box's CPU lists AMX, whose kernels crash in its VM.
# Without the multimodal library and llama.cpp's own programs (not used).
LLAMACPP_STAMP := $(VENV)/.llamacpp-installed
LLAMACPP_CMAKE := -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
ifeq ($(shell uname -m),x86_64)
LLAMACPP_CMAKE += -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
endif

$(LLAMACPP_STAMP): $(STAMP)
	CMAKE_ARGS="$(LLAMACPP_CMAKE)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(BIN)/python -m pip install -q --no-compile $(PIP_CONSTRAINTS) -e ".[llamacpp]"
	touch $(LLAMACPP_STAMP)

# `matrix run` prints the tables on stdout and its progress, the matrix id and the report's
# path on stderr (bars in a terminal); the newest stored matrix is the demo's.
demo: venv
	$(BIN)/python -c 'import specfleet.openblas as o; o.install()'
	$(BIN)/specfleet models fetch smollm2-135m
	mkdir -p reports
	$(BIN)/specfleet matrix run demo --report-dir reports
	@id=$$($(BIN)/specfleet matrix list --limit 1 | cut -d' ' -f1); \
	  echo "browse it: $(BIN)/specfleet serve --matrix $$id   (then open http://127.0.0.1:8266/matrices/$$id)"

# MLX's CPU backend runs on Debian's OpenBLAS where it is installed (specfleet/openblas.py;
# the demo installs it too). Three xdist workers, a test module whole on one (`--dist loadfile`), slowest module first
# (tests/conftest.py; xdist would reorder by test count): gw0 runs the modules that mostly
# wait on faults and leases while the other two compute (conftest's WAITING_MODULES).
test: venv $(LLAMACPP_STAMP)
	$(BIN)/python -c 'import specfleet.openblas as o; o.install()'
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder

# The inner loop: everything but the `slow` modules (no Ray, real model, browser or namespaces).
test-fast: venv
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder -m "not slow"

# ruff, the layer contract (import-linter), then mypy over specfleet/ (all in pyproject.toml).
lint: venv
	$(BIN)/ruff check specfleet tests bench tools
	$(BIN)/lint-imports
	$(BIN)/mypy

typecheck: venv
	$(BIN)/mypy

# For a lent GPU machine (bench/cuda_check.py): it has Python 3.12, a CUDA torch and numpy but
# an older transformers, and reaches no registry; these wheels travel with the tree (.whl/).
DEVICE_PLATFORMS := $(foreach p,manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014,--platform $(p)_x86_64)
device-wheels: venv
	rm -rf .whl && $(BIN)/python -m pip download -q -c constraints.txt --only-binary=:all: \
	  --python-version 3.12 --implementation cp $(DEVICE_PLATFORMS) -d .whl transformers kernels
	rm -f .whl/numpy-*.whl
	du -sh .whl

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
