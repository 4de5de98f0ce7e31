# The two set-up commands of the README: `make run` (the proxy, locally) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test test-core test-deploy bench clean

run: $(VENV)/.installed ## Run the proxy on 127.0.0.1:8080: SQLite store, demo route, auth off.
	RUNONCE_AUTH=none RUNONCE_ROUTES_FILE=examples/demo-routes.yaml RUNONCE_STORE=sqlite:///runonce.db \
		$(BIN)/runonce serve --host 127.0.0.1 --port 8080

test: test-core test-deploy ## The whole test suite: the service, then the deployment artifacts.

test-core: $(VENV)/.installed ## The service's tests (starts its own Firestore emulator).
	$(BIN)/pytest $(PYTEST_ARGS)

test-deploy: $(VENV)/.installed ## Image, deploy scripts and Terraform, checked offline (installs its tools).
	.ci/deploy-checks

bench: $(VENV)/.installed ## Claim-path benchmark against the Firestore emulator.
	$(BIN)/python bench/bench_delivery.py

$(VENV)/.installed: pyproject.toml guard/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet -e ./guard  # runonce-guard: tests/guard run in test-core
	touch $@

clean:
	rm -rf $(VENV) runonce.db runonce.db-wal runonce.db-shm
