# The two commands of the README: `make run` and `make test`. Both set up .venv first.
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup run test lint clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

setup: $(VENV)/.installed

run: setup
	snakemake --cores 1 train_slowfast

test: setup
	$(PY) -m pytest -q -n 3 --dist loadscope --no-loadscope-reorder --durations=30 $(PYTEST_ARGS)

lint: setup
	ruff check src tests bench
	snakemake --lint

clean:
	rm -rf results logs benchmarks .snakemake
