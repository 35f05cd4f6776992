# The two commands of the README: `make demo` and `make test`. Each builds .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.peertrain-installed
PLOTS  := $(VENV)/.peertrain-plots

.PHONY: demo test lint bench clean docs corpus real-run real-run-tune

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install -q --upgrade pip
	@# torch: the pinned CPU build when none is present (an unpinned torch pulls a multi-GB CUDA build)
	@$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q torch==2.13.0
	@$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/peertrain swarm local --nodes 4 --mode diloco --rounds 32 --inner-steps 50 --report demo-report.json

# Issue 30's real run. `corpus`: Debian's linux-doc (apt-get install linux-doc) as 8192 BPE
# tokens in build/corpus/<digest>/ (about 20 s; instant once cached). `real-run`: 4 daemons train
# MODEL on its train.bin as a DiLoCo group (int8, flag, the sharded exchange: REAL_RUN_EXCHANGE;
# at H = 40 it sends about 100x fewer bytes than data parallel), one member killed at KILL_AT s and
# restarted, a fifth daemon joining at LATE_JOIN (rN: once the creator is at round N), the model
# exported to real-run-model/ at the end; report in real-run-report.json. Then (BASELINE=yes) the
# data-parallel arm on the same tokens, its lr tuned on val.bin over REAL_RUN_LRS
# (benchmarks/real_run_baseline.py): real-run-baseline.json, real-run.png.
# Node 0 serves the dashboard at DASHBOARD; half way (round REAL_RUN_ROUNDS/2) a headless Chromium
# screenshots it to real-run-dashboard.png (benchmarks/dashboard_shot.py; said when it can't).
# MODEL=hf:examples/llama-25m.json EXPORT_FORMAT=hf for the llama-style model.
# Sized to fit an hour on 2 cores (~450 tokens/s whatever the batch): batch 2 of 256 tokens per
# member, a 20-step warm-up, 5 rounds of H = 40 (about 25 minutes), the arm's tuning and steps
# (about 25). `real-run-tune`: the members' inner learning rate (REAL_RUN_LR) picked on val.bin by
# short trials of one member's batch (benchmarks/real_run_tune.py; about a minute a trial here).
CORPUS            := build/corpus
MODEL             ?= gpt-25m
EXPORT_FORMAT     ?= safetensors
REAL_RUN_ROUNDS   ?= 5
REAL_RUN_H        ?= 40
REAL_RUN_BATCH    ?= 2
REAL_RUN_WARMUP   ?= 20
REAL_RUN_EXCHANGE ?= sharded
REAL_RUN_LR       ?= 2e-4
REAL_RUN_LRS      ?= 2e-4,4e-4,8e-4
KILL_AT           ?= 800
LATE_JOIN         ?= r2
BASELINE          ?= yes
DASHBOARD         ?= 127.0.0.1:9464
TOKENS             = $$($(BIN)/peertrain data prepare-corpus --out $(CORPUS) --quiet)/train.bin

corpus: $(STAMP)
	$(BIN)/peertrain data prepare-corpus --out $(CORPUS)

$(PLOTS): $(STAMP)
	@$(BIN)/python -m pip install -q -e '.[plots]'
	@touch $(PLOTS)

real-run-tune: corpus
	$(BIN)/python benchmarks/real_run_tune.py --model $(MODEL) --data $(TOKENS) \
	    --inner-steps $(REAL_RUN_H) --batch-size $(REAL_RUN_BATCH) \
	    --warmup-steps $(REAL_RUN_WARMUP) --lrs $(REAL_RUN_LRS)

real-run: corpus $(PLOTS)
	($(BIN)/python benchmarks/dashboard_shot.py http://$(DASHBOARD)/ real-run-dashboard.png \
	    --round $$(( $(REAL_RUN_ROUNDS) / 2 )) || echo "real-run: no dashboard screenshot") & \
	$(BIN)/peertrain swarm local --nodes 4 --mode diloco --model $(MODEL) --dataset tokens \
	    --data $(TOKENS) \
	    --set dataset_settings.block_size=256 --set dataset_settings.eval_chunks=8 \
	    --batch-size $(REAL_RUN_BATCH) --set warmup_steps=$(REAL_RUN_WARMUP) \
	    --lr $(REAL_RUN_LR) --codec int8 --aggregator flag \
	    --set exchange=$(REAL_RUN_EXCHANGE) \
	    --rounds $(REAL_RUN_ROUNDS) --inner-steps $(REAL_RUN_H) \
	    --kill-at $(KILL_AT) --late-join $(LATE_JOIN) \
	    --export real-run-model --export-format $(EXPORT_FORMAT) --report real-run-report.json \
	    --dashboard $(DASHBOARD); \
	status=$$?; wait; test $$status = 0
	test "$(BASELINE)" != yes || $(BIN)/python benchmarks/real_run_baseline.py \
	    --report real-run-report.json --data $(TOKENS) --lrs $(REAL_RUN_LRS) \
	    --png real-run.png --out real-run-baseline.json

# the rules the config holds run first: a lint failure is a test failure (CI runs this target).
# Then three phases. The in-process tests on PYTEST_WORKERS workers (pytest-xdist; on two cores
# they wait on timers and sockets more than they compute: 4.4 CPU-minutes in 5.6 minutes on 2
# workers, 3.9 minutes on 4). The tests that start daemons (`slow`) or network namespaces
# (`netns`, all on one worker) two at a time: many wait on a run's timeouts as much as they
# compute. Last, one at a time, the `serial` ones: they time what they measure, or load both
# cores alone (a dozen daemons).
PYTEST_WORKERS ?= 4

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -m "not slow and not netns" -n $(PYTEST_WORKERS)
	$(BIN)/python -m pytest -q -m "(slow or netns) and not serial" -n 2 --dist loadgroup
	$(BIN)/python -m pytest -q -m "serial"

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
