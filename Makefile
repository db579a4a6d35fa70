# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates .venv (if missing) and installs ddpkit with its test tools into it.

PYTHON ?= python3
VENV ?= .venv
# The torch release CI is tested with. On a GPU machine plain PyPI gives the CUDA build of it;
# override with e.g. `make demo TORCH_SPEC=torch` to take the newest.
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.ddpkit-installed

.PHONY: demo test lint install clean i18n

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ddpkit demo

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples

test: $(STAMP) lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Extract the messages (code and knowledge files), update the catalogs, compile them. Then
# translate what `tests/unit/test_i18n.py` lists as missing in src/ddpkit/locale/*/ddpkit.po.
i18n: $(STAMP)
	mkdir -p build
	$(BIN)/pybabel -q extract -F babel.cfg -k _ -k N_ -k ngettext:1,2 --no-wrap \
	  --sort-by-file -o build/ddpkit.pot .
	$(BIN)/pybabel -q update -D ddpkit -i build/ddpkit.pot -d src/ddpkit/locale --no-wrap \
	  --no-fuzzy-matching --ignore-obsolete
	$(BIN)/pybabel -q compile -D ddpkit -d src/ddpkit/locale --statistics

clean:
	rm -rf $(VENV) .venv-bare build src/*.egg-info .pytest_cache
