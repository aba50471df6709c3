# The two commands of the README, plus helpers. Each creates and fills .venv on first use.
#   make run    the main job: the three tasks on their embedded default data, each tested after fit,
#               then one summary table (lightning-tf tour)
#   make test   the unit tier of the test suite (under 3 minutes on 2 CPU cores; one pytest-xdist worker per
#               core, at most 4)
#   make test-integration   CLI subprocesses, DDP, resume, config builds, wandb content, benchmark smoke runs
#   make test-slow          quality thresholds (minutes of training)
#   make lint               ruff format --check and ruff check over the package, tests and benchmarks
#   make docs               the documentation site into site/ (mkdocs build --strict: a broken link or anchor, or a
#                           docstring griffe cannot read, fails it); mkdocs serve shows it while editing

VENV   := .venv
PY     := $(VENV)/bin/python
# The versions the project is developed and tested with; pyproject.toml states the supported range.
TORCH  := torch==2.14.1 torchvision==0.29.1
STAMP  := $(VENV)/.installed

.PHONY: install run run-text run-vision run-kline test test-integration test-slow lint docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev,hf,serve,tune,docs,published]' $(TORCH)
	touch $(STAMP)

FIT    := $(VENV)/bin/lightning-tf fit --config configs/trainer/default.yaml --test_after_fit true

run: $(STAMP)
	$(VENV)/bin/lightning-tf tour

run-text: $(STAMP)
	$(FIT) --config configs/text/synthetic.yaml

run-vision: $(STAMP)
	$(FIT) --config configs/vision/digits.yaml

run-kline: $(STAMP)
	$(FIT) --config configs/kline/msft_daily.yaml

test: $(STAMP)
	$(PY) -m pytest -q -n auto --maxprocesses 4 --durations=10

# both cores: each test file runs whole in one worker (its module fixtures, such as a started server, are paid once)
test-integration: $(STAMP)
	$(PY) -m pytest -q -m integration --integration -n 2 --dist loadfile --durations=15

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow --runslow

lint: $(STAMP)
	$(VENV)/bin/ruff format --check lightning_tf tests benchmarks
	$(VENV)/bin/ruff check lightning_tf tests benchmarks

# NO_MKDOCS_2_WARNING: Material's notice about MkDocs 2, printed on every build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP)
	$(PY) benchmarks/core_layers.py

clean:
	rm -rf runs wandb lightning_logs .pytest_cache site
