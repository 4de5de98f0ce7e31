# The two set-up commands of the README: `make run` (the proxy, locally) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

PIP_TOOLS := .tools/pip-tools/bin
PIP_COMPILE = $(PIP_TOOLS)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links --all-build-deps $(PIP_COMPILE_ARGS)

.PHONY: run test test-core test-deploy bench clean lock

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

# Installs exactly the lock (hashes verified), then the project itself, editable, with no other download.
$(VENV)/.installed: pyproject.toml requirements/test.txt guard/pyproject.toml
	$(PYTHON) requirements/stamp.py --check
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements/test.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --no-index -e .
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --no-index -e ./guard  # runonce-guard: tests/guard run in test-core
	touch $@

lock: ## Re-lock requirements/*.txt (with hashes) after changing pyproject.toml's dependencies; PIP_COMPILE_ARGS=--upgrade to upgrade.
	test -x $(PIP_TOOLS)/pip-compile || { $(PYTHON) -m venv .tools/pip-tools && $(PIP_TOOLS)/pip install --quiet pip-tools==7.6.2; }
	$(PIP_COMPILE) --extra test -o requirements/test.txt pyproject.toml
	$(PIP_COMPILE) -c requirements/test.txt --extra spanner --extra redis -o requirements/runtime.txt pyproject.toml  # the image carries every store's driver
	$(PYTHON) requirements/stamp.py --write

clean:
	rm -rf $(VENV) runonce.db runonce.db-wal runonce.db-shm
