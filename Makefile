# askdb: the two commands a newcomer needs.
#   make demo   install, start the embedded services, load demo data, serve on 127.0.0.1:8000
#   make test   install (incl. Chromium for browser tests), ruff, the whole pytest suite
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Each set-up step prints one line with its time; pip's own output goes to this log.
STEP := scripts/step.py
INSTALL_LOG := $(or $(ASKDB_HOME),.askdb)/log/install.log
PIP := $(PY) -m pip install --disable-pip-version-check --progress-bar off

.PHONY: demo test install lint format smoke services-stop bench bench-ehrsql bench-answerability bench-scale clean browser editor

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 || { echo "askdb: Python 3.11 is required (python3.11 not found); install it and retry"; exit 1; }
	@py=$$(command -v $(PYTHON) || command -v python3); \
	  $$py -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || { echo "askdb: Python 3.11 is required, found $$($$py --version); set PYTHON=/path/to/python3.11"; exit 1; }; \
	  echo "askdb: installing into $(VENV) (a few minutes the first time; the full output goes to $(INSTALL_LOG))"; \
	  [ -x $(PY) ] || $$py $(STEP) "creating the virtualenv $(VENV)" $(INSTALL_LOG) -- $$py -m venv $(VENV) || { echo "askdb: could not create $(VENV); install the python3-venv package"; exit 1; }
	@$(PY) $(STEP) "upgrading pip" $(INSTALL_LOG) -- $(PIP) --upgrade pip
	@# The CPU build of torch first, so sentence-transformers does not pull a CUDA build.
	@$(PY) $(STEP) "installing torch (CPU build)" $(INSTALL_LOG) -- $(PIP) torch==2.13.0
	@$(PY) $(STEP) "installing askdb and its dependencies" $(INSTALL_LOG) -- $(PIP) -e '.[dev]'
	@# medspaCy without its spaCy < 3.8 cap (see pyproject.toml): the rest of its needs are pinned there.
	@$(PY) $(STEP) "installing medspaCy" $(INSTALL_LOG) -- $(PIP) --no-deps medspacy==1.3.1 PyRuSH==1.0.13
	@touch $(STAMP)

# askdb's own bytecode, as pip writes it for every installed package: an editable install writes
# none, and with PYTHONDONTWRITEBYTECODE set (as in many containers) every command, worker and
# calibration process compiled its ~250 modules again (a seventh of a command's start-up).
# Up-to-date files are skipped, so this costs a fraction of a second after a pull.
install: $(STAMP)
	@$(PY) -m compileall -q -j 0 askdb core infra metadata_admin phenotypes evaluation config manage.py >/dev/null

demo: install
	@$(PY) manage.py demo

smoke: install
	@$(PY) manage.py demo --smoke

# Debian's chromium drives the browser tests (Playwright never downloads a browser here).
# As root there is no sudo; through sudo the environment is reset, so `env` carries
# DEBIAN_FRONTEND into apt-get either way. With CI=true a failed install fails the run.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests…"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  if $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
	    && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; then :; \
	  elif [ -n "$$CI" ] && [ "$$CI" != false ]; then \
	    echo "askdb: could not install chromium, and with CI=true the browser tests may not be skipped"; exit 1; \
	  else echo "askdb: could not install chromium; browser tests will be skipped"; fi; }

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# pytest's exit code 5 means it collected no tests: a failure, said plainly.
test: install browser lint
	@$(VENV)/bin/pytest; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "askdb: pytest collected no tests"; fi; exit $$rc

# COMMON_CPU=1: AVX-512 off for numpy, torch and OpenBLAS (a stand-in for servers without it).
bench: install
	$(PY) benchmarks/run.py $(if $(COMMON_CPU),--common-cpu)

# The answerability gate on EHRSQL-2024 (train → valid); needs ../shared/ehrsql-2024-dev.
bench-answerability: install
	nice $(PY) benchmarks/ehrsql_answerability.py --json .askdb/bench-answerability.json

# The verified library alone on EHRSQL-2024 (library = train, questions = valid, no LLM); needs ../shared.
bench-ehrsql: install
	nice $(PY) benchmarks/ehrsql.py

# The clinical database at 10,000 patients (PATIENTS=N) beside the demo size, extrapolated to the
# full MIMIC-IV; its own state folder .askdb/bench-scale (see benchmarks/scale.py).
PATIENTS ?= 10000
bench-scale: install
	nice $(PY) benchmarks/scale.py --patients $(PATIENTS)

# The reviewers' SQL editor (CodeMirror 6 + @codemirror/lang-sql) is one committed bundle,
# static/askdb/sql_editor.js: only rebuilding it needs node and npm (versions pinned in
# frontend/package-lock.json); make demo and make test use the committed file.
editor:
	cd frontend && npm ci --no-audit --no-fund && npm run build

services-stop: install
	@$(PY) manage.py services stop

clean:
	-$(PY) manage.py services stop 2>/dev/null
	rm -rf $(VENV) .askdb
