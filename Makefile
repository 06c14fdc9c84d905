# Quick start: `make demo` (the core install, ONNX Runtime: under 2 minutes) and `make test` (every extra)
# on a machine with Python >= 3.10 and make.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the core alone (ONNX Runtime): what the demo needs; `make test` after `make demo` installs the rest
CORE_STAMP := $(VENV)/.core-stamp

.PHONY: demo test lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# open-clip-torch only for the CLIP vocabulary file it ships (stable-diffusion-xl's CLIP score): without its
# dependencies, since the torchvision it requires has no CPU build (mlharness never imports open_clip)
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "open-clip-torch==3.3.0"
	$(BIN)/python -m pip install --quiet --no-deps "openai-whisper==20250625"  # whisper-random's BPE ranks file
	touch $(STAMP)

$(CORE_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE_STAMP)

demo: $(CORE_STAMP)
	$(BIN)/mlharness run --scenario Offline --mode accuracy

# The suite on PYTEST_WORKERS processes (pytest-xdist; a file's tests stay on one worker, so its module fixtures
# are made once), then alone the tests marked 'timing' (VALID on the first try, calibrated durations, a busy core),
# so that no other test shares the CPU with them. A test of the first part that failed while sharing the CPU is
# run once more alone (pytest's --last-failed), as the whole suite once ran: the target fails if it fails again;
# the log keeps both. Both parts always run; either failing fails the target.
# Python's bytecode caches are written for the suite even where PYTHONDONTWRITEBYTECODE is set: without them each
# of the suite's ~3,000 processes compiled the package anew (0.1-0.3 s of CPU each) and each pytest session
# rewrote the assertions of every test module (9 s of its 16 s collection). compileall makes them once, up front,
# so the workers and the runs they start only read them.
PYTEST_WORKERS ?= 2
test: $(STAMP)
	@status=0; unset PYTHONDONTWRITEBYTECODE; \
	$(BIN)/python -m compileall -q -j 0 mlharness tests scripts >/dev/null; \
	$(BIN)/python -m pytest -q --durations=25 -n $(PYTEST_WORKERS) --dist loadfile -m "not timing" || { \
	  echo "== the tests above that failed while sharing the CPU, run again alone =="; \
	  $(BIN)/python -m pytest -q --last-failed --last-failed-no-failures none -m "not timing" || status=$$?; }; \
	$(BIN)/python -m pytest -q --durations=10 -m timing || status=$$?; \
	exit $$status

lint: $(STAMP)
	$(BIN)/python -m pip install --quiet ruff
	$(BIN)/ruff check mlharness tests scripts

clean:
	rm -rf $(VENV) results .pytest_cache
