# Set-up is part of every target: the first `make run` or `make test` on a fresh machine
# creates .venv, installs torch first (torch==2.13.0, or the torch your python3 already has),
# then pardash with its test extras. Override: make TORCH_SPEC='torch==2.9.1' PYTHON=python3.12
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
ARGS ?= --strategy fsdp --nproc 2 --steps 3000

.PHONY: setup run test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "using the torch that $(PYTHON) already has"; $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; fi
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test,export]"
	@touch $@

run: setup
	$(VENV)/bin/pardash launch $(ARGS)

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
