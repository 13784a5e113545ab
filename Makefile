# The two commands a user needs: `make demo` and `make test`. Both install what is missing.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Debian packages the tests and the demo use (sshd per netns host, iptables/tc for nemeses),
# and those each system under test names in its own package (harness/systems/*/debian-packages:
# etcd's server and client), so adding a system touches only its package and the registry.
SYSPKGS := openssh-server iproute2 iptables util-linux faketime libnetfilter-queue-dev fuse3 libfuse2 chromium default-jre-headless vagrant $(shell cat $(wildcard harness/systems/*/debian-packages) /dev/null)
# What each system's client needs on this machine (harness/systems/*/requirements.txt).
SYSREQS := $(wildcard harness/systems/*/requirements.txt)

.PHONY: demo test bench lint clean setup sysdeps venv-python coverage-sim coverage-suite

setup: sysdeps venv-python $(STAMP)

sysdeps:
	@missing=$$(for p in $(SYSPKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@# A system's own preparation of this machine (etcd's: Debian enables a member on localhost,
	@# and the harness runs its own members).
	@for s in $(wildcard harness/systems/*/machine-setup.sh); do bash $$s || exit 1; done

# The venv's interpreter: the distribution's /usr/bin/python3 when it is 3.11 or newer, as on
# the hosts the harness deploys to, else the first python3 on PATH; `make PYTHON=...` picks
# another. Debian builds its Python with profile-guided and link-time optimization, and a
# pyenv build without --enable-optimizations ran the simulator's seeds 1.35x slower and the
# speed anchor 1.9x slower on the same VM (docs/decisions/distribution-python.md).
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo /usr/bin/python3 || echo python3)

# A venv made from another interpreter than PYTHON (an older checkout's, or PYTHON given) is
# made again, saying so: the editable install keeps nothing a new venv loses.
venv-python:
	@if [ -x $(PY) ]; then \
	  have=$$($(PY) -c 'import os, sys; print(os.path.realpath(sys._base_executable))' 2>/dev/null); \
	  want=$$($(PYTHON) -c 'import os, sys; print(os.path.realpath(sys.executable))'); \
	  if [ "$$have" != "$$want" ]; then \
	    echo "making $(VENV) again: it runs $${have:-an interpreter that no longer starts}, PYTHON is $$want"; \
	    rm -rf $(VENV); \
	  fi; \
	fi

# Debian's python3 needs python3-venv; pyenv or other Pythons already have venv.
$(VENV)/bin/python:
	@$(PYTHON) -m venv --help >/dev/null 2>&1 && $(PYTHON) -c 'import ensurepip' 2>/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(VENV)/bin/python pyproject.toml $(SYSREQS)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[host,pysyncobj,harness,reports,test]' $(foreach r,$(SYSREQS),-r $(r))
	touch $(STAMP)

# Two pytest runs side by side: the netns tests, one at a time, and the rest (tests/run_suite.py).
test: setup
	$(PY) tests/run_suite.py

# The product's main job: a 5-host netns cluster, a 60 s register test with every nemesis and
# fast failure detection (27 leader elections in a measured run), Spark analysis of the store,
# and the path of the run's HTML report (printed last). `tessera replay <run dir>` reruns it.
# 50 processes: with eight fault packages overlapping, a process spends much of the run waiting
# out an unavailable tablet, and the others keep the history dense (~5,800 ok ops, measured).
# A verdict (exit 0 valid, 1 invalid, 2 unknown) of this or an older run never stops the demo,
# nor does a crash that still left a run (255 with the run directory printed): the report says
# what happened. Bad arguments (254), a crash before any run was made, or a crashed analysis stop it.
demo: setup
	$(VENV)/bin/tessera cluster up
	@run=$$($(VENV)/bin/tessera test --workload register --nemesis all --time-limit 60 \
	    --fast-failure-detection --concurrency 50 --rate 200 --store store); code=$$?; run=$$(tail -n1 <<<"$$run"); \
	if [ -z "$$run" ] || [ ! -d "$$run" ]; then echo "tessera test made no run (exit $$code)" >&2; exit $$(( code ? code : 255 )); fi; \
	echo "tessera test exit $$code ($$run)"; \
	$(VENV)/bin/tessera analyze store; code=$$?; \
	if [ $$code -ge 254 ]; then echo "tessera analyze failed (exit $$code)" >&2; exit $$code; fi; \
	echo "the 5 netns hosts stay up for the next run; '$(VENV)/bin/tessera cluster down' removes them"; \
	echo "report: $$(readlink -f "$$run")/report.html"

bench: setup
	$(PY) -m pip install -q -e '.[host,pysyncobj,harness,reports,test,bench]'
	@for b in bench/[a-z]*.py; do echo "== $$b"; $(PY) $$b --json || exit 1; done

# What the whole-stack simulator reaches of the engine: SEEDS swarm seeds under coverage.py
# with branch coverage of node/; an HTML report and one JSON line (line and branch percent
# per package). About as long as `tessera sim --stack full --seeds SEEDS`, and twice that.
SEEDS ?= 200
coverage-sim: setup
	$(PY) -m reports.coverage_sim --seeds $(SEEDS)

# The suite's own coverage of node/, the figure beside the simulator's (not the netns tests).
coverage-suite: setup
	$(PY) -m reports.coverage_sim --suite

# ruff, then mypy over the strictly typed packages (pyproject.toml [tool.mypy]; tests/test_types.py)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
