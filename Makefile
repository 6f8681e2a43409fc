# The two commands a newcomer needs: `make demo` and `make test`. Each installs first when needed.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
UV_VERSION := 0.13.8
PYTEST_ARGS ?=

.PHONY: install demo test check bench lock clean

install: $(STAMP)

# Re-installs only when the lock or the project file changed since the last install.
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	$(BIN)/uv pip install -q --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/wedgewatch demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

check: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/wedgewatch bench proxy
	$(BIN)/wedgewatch bench runner
	$(BIN)/wedgewatch bench llamacpp

# Regenerates the one lock from pyproject.toml, every extra included (needs network to PyPI).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra all --extra dev --python-version 3.11 -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
