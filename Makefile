# The two commands of the README: `make demo` and `make test`. Each builds .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.peertrain-installed

.PHONY: demo test lint bench clean docs

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@# torch: the pinned CPU build when none is present (an unpinned torch pulls a multi-GB CUDA build)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	@$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/peertrain swarm local --nodes 4 --mode diloco --rounds 32 --inner-steps 50 --report demo-report.json

# the rules the config holds run first: a lint failure is a test failure (CI runs this target)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	@mkdir -p build/typing && ln -sfn ../.. build/typing/peertrain  # see pyproject's [tool.mypy]
	$(BIN)/mypy

# The documentation site (mkdocs.yml, docs/) into build/site, strict: any warning fails it.
# It needs only the `docs` extra's packages (not torch nor the package), installed when missing.
DOCS_EXTRA = import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs'])

docs:
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c "import material" 2>/dev/null || $(BIN)/python -m pip install -q $$($(BIN)/python -c "$(DOCS_EXTRA)")
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) *.egg-info
