# Set-up is part of every target: the first `make run` or `make test` on a fresh machine
# creates .venv and installs pardash with its test extras and torch==2.13.0 pinned in the same
# pip run (or uses the torch your python3 already has). Override: make TORCH_SPEC='torch==2.9.1' PYTHON=python3.12
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
	@# One resolver run (about 10 s less than two); torch pinned in it unless the venv has one.
	@# --no-compile: pip byte-compiles every file it installs (25 s of a 48 s set-up here), most
	@# of which nothing imports; what a run and the tests import is compiled after it (6 s).
	@torch="$(TORCH_SPEC)"; $(PY) -c "import torch" 2>/dev/null && torch=""; \
	  echo "$(PY) -m pip install -q --no-compile $$torch -e .[test,export]"; \
	  $(PY) -m pip install -q --no-compile $$torch -e ".[test,export]"
	@PYTHONDONTWRITEBYTECODE= $(PY) -c "import pardash.cli, pardash.tui.app, pardash.trainer.train, pardash.trainer.autorun, \
	  torch.distributed.run, torch._dynamo, torch.distributed.fsdp, torch.distributed.checkpoint, pytest, xdist, hypothesis"
	@touch $@

run: setup
	$(VENV)/bin/pardash launch $(ARGS)

# The suite in two parts: most tests on TEST_JOBS workers (pytest-xdist; the shared launches
# stay on one worker), then alone the few whose verdicts are judged from real processes' timing
# and which another test's load beside it could sway (marked serial: a clean run has no
# straggler). Fails if either does. (The second collects only the files that hold such tests:
# collecting all of them is 6 s of one core.)
# More workers than cores: the real-process tests wait on their jobs much of the time (on 2 cores,
# 502 s with 2 workers, 425 s with 3; on a slower day, 530 s with 3 and 485 s with 4; on
# 2026-12-06, 515 s and 927 CPU-s with 3, 522 s and 1011 CPU-s with 4: as fast, the fourth
# worker's overlap of the others' waits spent on the contention it adds). Since 2026-12-07 the
# tests' ranks are forked from a warm process (tests/scripts/rank_zygote.py), a third of the CPU
# they took: 426 s and ~800 CPU-s with 4 workers, 359 s and ~700 with 6 (the waits overlap more).
TEST_JOBS ?= 6
# Bytecode is written (PYTHONDONTWRITEBYTECODE emptied for the run): the suite starts about a
# thousand Python processes, each of which compiled the project's modules (and pytest's workers
# the rewritten test modules, 5 s each) again where none was kept.
test: setup
	@export PYTHONDONTWRITEBYTECODE=; \
	  $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup -m "not serial"; a=$$?; \
	  $(PY) -m pytest -q -m serial $$(grep -rl --include='*.py' 'mark.serial' tests); b=$$?; \
	  [ $$a -eq 0 ] && [ $$b -eq 0 ]

bench: setup
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
