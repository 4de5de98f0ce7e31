# The two set-up commands of the README: `make run` (the proxy, locally) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# gcloud-tasks-emulator pins protobuf < 5: it gets a venv of its own (tests/support/tasks_emulator.py).
TASKS_EMULATOR := .tools/tasks-emulator/.installed

PIP_TOOLS := .tools/pip-tools/bin
PIP_COMPILE = $(PIP_TOOLS)/pip-compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links --all-build-deps $(PIP_COMPILE_ARGS)

.PHONY: run test test-fast lint test-core test-deploy docs reference discovery oneofs bench mutate clean lock redis-server release dev-version

run: $(VENV)/.installed ## Run the proxy on 127.0.0.1:8080: SQLite store, demo route, auth off.
	RUNONCE_AUTH=none RUNONCE_ROUTES_FILE=examples/demo-routes.yaml RUNONCE_STORE=sqlite:///runonce.db \
		$(BIN)/runonce serve --host 127.0.0.1 --port 8080

test: lint test-core test-deploy docs ## The whole test suite: the rules (fast, first), the service, the deployment artifacts, then the docs site built strictly.

lint: $(VENV)/.installed ## Lint, format, types and the layers' import contract (pyproject.toml: [tool.ruff], [tool.mypy], [tool.importlinter]).
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The test runs keep compiled modules, and pytest's rewritten test modules (a third of each worker's
# start), even where PYTHONDONTWRITEBYTECODE is set: in the venv, not beside the sources.
BYTECODE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache

# In-process tests only (SQLite and memory stores, the app in-process): no emulator, redis-server,
# gcloud, podman or root, and no child process. Tests that need one are marked `services` (tests/conftest.py
# does it for the store fixtures' users) or `subprocess`; one that starts either unmarked fails here,
# naming the marker.
test-fast: $(VENV)/.installed ## The in-process suite in about a minute (on every core: pytest-xdist), with nothing but the venv.
	$(BYTECODE) RUNONCE_TESTS_IN_PROCESS_ONLY=1 $(BIN)/pytest -q -p no:cacheprovider -m "not deploy and not e2e and not services and not subprocess" \
		--ignore=tests/sim -n auto $(PYTEST_ARGS)

# Two pytest-xdist workers: most of the service's tests wait (on leases, servers, emulators), so two
# halve the wall time even on two cores. Each worker starts its own emulators and redis-server.
CORE_WORKERS ?= 2

test-core: $(VENV)/.installed $(TASKS_EMULATOR) redis-server ## The service's tests (start their own Firestore, Spanner and Cloud Tasks emulators and redis-server).
	$(BYTECODE) $(BIN)/pytest -n $(CORE_WORKERS) $(PYTEST_ARGS)

test-deploy: $(VENV)/.installed ## Image, deploy scripts and Terraform, checked offline (installs its tools).
	.ci/deploy-checks

docs: $(VENV)/.installed ## The documentation site, built strictly into site/ (a warning, such as a broken link, is an error).
	$(BIN)/properdocs build --strict --clean -f mkdocs.yml -d site

reference: $(VENV)/.installed ## Regenerate docs/reference/ (settings, statuses, CLI, routes file and its JSON Schema) from the code.
	$(BIN)/python scripts/reference.py

bench: $(VENV)/.installed ## runonce against a hand-written handler (literal and async): CPU, latency, memory, cold start; BENCH_ARGS=--smoke for seconds.
	$(BIN)/python bench/bench_perf.py $(BENCH_ARGS)

release: $(VENV)/.installed ## Prepare release VERSION=X.Y.Z: CHANGELOG's Unreleased becomes X.Y.Z, the version is written (docs/how-to/release.md).
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=X.Y.Z" >&2; exit 2; }
	$(BIN)/python scripts/release.py release $(VERSION)

dev-version: $(VENV)/.installed ## After a release's tag: main becomes the development version VERSION=X.Y.Z.devN.
	@test -n "$(VERSION)" || { echo "usage: make dev-version VERSION=X.Y.Z.devN" >&2; exit 2; }
	$(BIN)/python scripts/release.py dev $(VERSION)

oneofs: $(VENV)/.installed ## Regenerate the oneof groups of those documents' schemas (runonce/targets/discovery/oneofs.json) from a googleapis checkout: make oneofs GOOGLEAPIS=DIR
	$(BIN)/python -m tests.support.oneofs_vendor $(GOOGLEAPIS)

discovery: $(VENV)/.installed ## Regenerate the discovery documents google_api routes are checked against (runonce/targets/discovery/) from the locked google-api-python-client.
	$(BIN)/python -m tests.support.discovery_vendor

# Mutation testing (CONTRIBUTING.md): by hand before a change to the core lands, not in CI.
# `make mutate MUTANTS='runonce.run.delivery*'` runs one module's mutants while iterating.
MUTANTS ?=
IN_PROCESS := -p no:cacheprovider -m "not deploy and not e2e and not subprocess" -k "not firestore" --ignore=tests/sim --ignore=tests/guard
mutate: $(VENV)/.installed $(VENV)/.mutate-installed redis-server ## Mutation score of the exactly-once core (~30 min on 2 cores).
	$(BIN)/pytest -q $(IN_PROCESS)
	rm -rf mutants  # a fresh run: mutmut maps tests to functions once, new tests would go unseen
	$(BIN)/mutmut run $(MUTANTS) > mutants.log 2>&1 || (tail -20 mutants.log; exit 1)
	$(BIN)/python -m tests.support.mutation_summary

$(VENV)/.mutate-installed: pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,mutate]'
	touch $@

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
	$(PIP_COMPILE) --extra test --extra bench --extra lint --extra docs -o requirements/test.txt pyproject.toml  # bench: the benchmarks' tools (make bench); docs: make docs
	$(PIP_COMPILE) -c requirements/test.txt --extra spanner --extra redis -o requirements/runtime.txt pyproject.toml  # the image carries every store's driver
	$(PYTHON) requirements/stamp.py --write

# The Redis store's tests run a real redis-server (Debian's package); the Firestore and Spanner
# emulators come with gcloud.
redis-server:
	@command -v redis-server >/dev/null || { \
	  echo "installing redis-server (Debian package) for the Redis store's tests" >&2; \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq redis-server >/dev/null; \
	} || { echo "redis-server is missing and could not be installed: run apt-get install -y redis-server" >&2; exit 1; }

$(TASKS_EMULATOR):
	test -x $(dir $@)bin/python || $(PYTHON) -m venv $(dir $@)
	$(dir $@)bin/python -m pip install --quiet gcloud-tasks-emulator==0.6.2
	touch $@

clean:
	rm -rf $(VENV) runonce.db runonce.db-wal runonce.db-shm site
