# stream-osc: set up, test and run the embedded local stack (see docs/stack.md).
VENV := .venv
PY := $(VENV)/bin/python
OSC := $(VENV)/bin/stream-osc

.PHONY: setup lint check test test-slow demo bench up down status

setup:
	bash stack/bootstrap.sh

lint: setup
	$(VENV)/bin/ruff check .

# The inner loop: lint and the unit tests, no services (under a minute).
check: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q tests/unit

# pytest exits 5 when it collected no test: that is a failure here, not a pass. TEST_WORKERS processes run the
# test files side by side against one stack; a test marked `exclusive` runs alone (tests/README.md).
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) --dist loadfile tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; exit $$rc

test-slow: setup
	$(PY) -m pytest -m slow tests; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-slow: no tests were collected" >&2; exit 1; fi; exit $$rc

# The demo runs on the embedded stack only: it refuses STREAM_OSC_* variables naming another server, then
# starts the stack (stream-osc stack up) and migrates its own table there.
demo: setup
	$(PY) -m demo

bench: setup
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(PY) -m bench $(BENCH_ARGS)

up: setup
	$(OSC) stack up

down:
	@if [ -x $(OSC) ]; then $(OSC) stack down; fi

status:
	$(OSC) stack status
