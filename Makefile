# Flywheel Lake. `make run` and `make test` are all a fresh clone needs (Python 3.11+, make).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

# Dagster and Great Expectations must never phone home (the pipeline runs without network).
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export DAGSTER_DISABLE_TELEMETRY := yes
export GX_ANALYTICS_ENABLED := false

.PHONY: install run test ui bench check clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

run: install  ## run the whole pipeline on the bundled sample lake in data/raw
	$(BIN)/flywheel run

test: install  ## the test suite (CI runs exactly this)
	$(BIN)/python -m pytest -q

ui: install  ## the Dagster UI on http://127.0.0.1:3000
	$(BIN)/dg dev --host 127.0.0.1 --port 3000

bench: install  ## benchmark on a generated 1,000,000-interaction lake
	$(BIN)/flywheel bench

check: install  ## Dagster definitions load
	$(BIN)/dg check defs

clean:
	rm -rf data/warehouse.duckdb data/.flywheel data/exports data/bench
