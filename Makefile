# jaxkit: the two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.jaxkit-stamp
PYTEST_WORKERS ?= 2
NAME ?=

BENCH_STAMP := $(VENV)/.jaxkit-bench-stamp

.PHONY: demo test test-slow lint bench report venv clean softjax-venv docs docs-figures

# The venv is rebuilt whenever pyproject.toml or constraints.txt change.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[all,test,lint]"
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) scripts/run_examples.py --quick --out out

# Tests write bytecode caches (`__pycache__/`, git-ignored) even where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's does): without them every worker re-compiles each
# module it imports and pytest re-rewrites every test module's asserts, on every run. A
# worker's collection: 12.4-12.9 s without caches, 9.2-9.8 s with (the first run writes them;
# `.ci/run`'s `make test-slow` passes then find them).
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest

test: $(STAMP)
	$(PYTEST) -n $(PYTEST_WORKERS) -q --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# pytest exits 5 when no test is selected: that is not a failure. The slow tier runs in two
# passes: most of it with the back end's optimisation off, as `make test` (tests/conftest.py),
# and the tests marked `xla_defaults` (examples end to end, float32 solver tolerances) with
# XLA's default back end, the numerics users get.
SLOW_OK = rc=$$?; if [ $$rc -eq 5 ]; then rc=0; fi
test-slow: $(STAMP)
	$(PYTEST) -n $(PYTEST_WORKERS) -q -m "slow and not xla_defaults" --durations=15; \
	$(SLOW_OK); r1=$$rc; \
	JAXKIT_TEST_XLA_DEFAULTS=1 $(PYTEST) -n $(PYTEST_WORKERS) -q -m "slow and xla_defaults" \
	  --durations=15; $(SLOW_OK); echo "test-slow: pass 1 exit $$r1, pass 2 (XLA defaults) exit $$rc"; \
	[ $$r1 -eq 0 ] && [ $$rc -eq 0 ]

# `make bench` adds the `bench` extra (anchors such as ott-jax) to the same venv.
$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e ".[all,test,lint,bench]"
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	@test -n "$(NAME)" || { echo "usage: make bench NAME=<area> [ARGS=--full]"; ls scripts/bench | grep -v '^_' | sed 's/\.py$$//'; exit 2; }
	SOFTJAX_PYTHON=$${SOFTJAX_PYTHON:-$$(test -x .venv-softjax/bin/python && echo .venv-softjax/bin/python)} \
	  $(PY) scripts/bench/$(NAME).py $(ARGS)

# `make report`: BENCHMARKS.md and the README's marked figures from the saved runs in
# benchmarks/*.jsonl; `make report RUN="nn sampling"` first re-runs those areas' quick
# benches (RUNS times each, default 3) and saves them.
RUN ?=
RUNS ?= 3
report: $(BENCH_STAMP)
	SOFTJAX_PYTHON=$${SOFTJAX_PYTHON:-$$(test -x .venv-softjax/bin/python && echo .venv-softjax/bin/python)} \
	  $(PY) scripts/bench/report.py $(if $(RUN),--run $(RUN) --repeats-runs $(RUNS))

# `make docs`: the documentation site in site/ (mkdocs-material + mkdocstrings; pages in docs/,
# template in docs/README.md), built in strict mode: any warning fails. The `docs` extra is
# installed into the same venv once; after that the build is offline.
DOCS_STAMP := $(VENV)/.jaxkit-docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -c constraints.txt -e ".[all,test,lint,docs]"
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# `make docs-figures`: docs/figures/ from out/ (after `make demo`) or quick runs of the examples.
docs-figures: $(STAMP)
	$(PY) scripts/docs/figures.py

# softjax (the soft bench's anchor) needs Python >= 3.12: a separate venv, used as a subprocess.
SOFTJAX_PY ?= $(lastword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python))
softjax-venv:
	@test -n "$(SOFTJAX_PY)" || { echo "softjax needs Python >= 3.12: make softjax-venv SOFTJAX_PY=/path/to/python3.12"; exit 2; }
	test -x .venv-softjax/bin/python || $(SOFTJAX_PY) -m venv .venv-softjax
	.venv-softjax/bin/pip install -q -c constraints.txt softjax==0.1.1  # the same jax as ours

clean:
	rm -rf out site .pytest_cache
