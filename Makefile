# The two entry points of the README. Each creates the virtual environment it needs from PyPI.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast lint install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(BIN)/kafka-health demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

# The dashboards' tests run a real Prometheus (and promtool): Debian's package, installed when missing (as
# root, or through sudo). If it cannot be installed the tests fail and say how; KAFKA_HEALTH_SKIP_PROMETHEUS=1
# skips both the install and those tests.
.PHONY: prometheus
prometheus:
	@if [ "$${KAFKA_HEALTH_SKIP_PROMETHEUS:-0}" = 1 ] || { command -v prometheus && command -v promtool; } >/dev/null; then \
		exit 0; \
	fi; \
	SUDO=; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
	echo "installing Debian's prometheus package (for the dashboards' tests)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus; } || \
		echo "could not install prometheus: run 'apt-get install prometheus' as root (or set KAFKA_HEALTH_SKIP_PROMETHEUS=1)" >&2

# The Alertmanager delivery test runs a real Alertmanager: Debian's package, installed the same way. If it
# cannot be installed, that test fails under CI (CI=true) and is skipped elsewhere, saying how.
.PHONY: alertmanager
alertmanager:
	@if command -v prometheus-alertmanager >/dev/null || command -v alertmanager >/dev/null; then \
		exit 0; \
	fi; \
	SUDO=; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
	echo "installing Debian's prometheus-alertmanager package (for the Alertmanager delivery test)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$SUDO apt-get install -y -qq --no-install-recommends prometheus-alertmanager >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus-alertmanager; } || \
		echo "could not install prometheus-alertmanager: run 'apt-get install prometheus-alertmanager' as root" >&2

test: lint prometheus alertmanager
	$(BIN)/pytest -n 3 --dist loadfile --durations=30

# The pure tests alone (marker `unit`: no sockets, no subprocesses, no Spark), the property tests with
# fewer examples: about 2 minutes on 2 busy cores. `make test` runs everything.
test-fast: $(VENV)/.installed-dev
	$(BIN)/pytest -m "unit and not spark" -q -p no:cacheprovider --hypothesis-profile=fast

# Schemathesis against the running service, longer than CI's run (docs/api.md, "Fuzzing the API").
FUZZ_EXAMPLES ?= 200
.PHONY: fuzz
fuzz: $(VENV)/.installed-dev
	KAFKA_HEALTH_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest tests/app/service/test_openapi_fuzz.py -p no:cacheprovider -s

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
