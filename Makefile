# The two commands of the README: `make dev` and `make test`. Both build .venv first.
PYTHON ?= $(shell pyenv root 2>/dev/null)/versions/$(shell cat .python-version)/bin/python
ifeq ($(wildcard $(PYTHON)),)
PYTHON := python3.12
endif
VENV := .venv
BIN := $(VENV)/bin
PROTO_OUT := libs/common/src/loam_common/gen

ENGINES := .engines

.PHONY: venv-pgo engines-spark engines-spark-jvm test-engines venv dev test proto proto-check lint compose-check bench celery-conformance bench-anchors bench-smoke clean test-bullmq bullmq-gen bullmq-gen-check bench-bullmq test-durable-ts engines-flink test-engines-flink bench-flink console console-gen console-gen-check test-console console-screenshots chromium bench-console test-chaos test-console-scale bench-console-list

PACKAGES := libs/common services/durable services/queue-core services/sweeper services/relay services/gateway services/engines adapters/python adapters/celery

$(BIN)/.installed: $(addsuffix /pyproject.toml,$(PACKAGES)) requirements-dev.txt adapters/celery/setup.py adapters/celery/loam_celery.pth
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt -e 'libs/common[tikv,serve]' $(addprefix -e ,$(filter-out libs/common,$(PACKAGES)))
	touch $@

venv: $(BIN)/.installed

# The engines' own environments (never the core .venv): Sail and the PySpark 4.2 client
# for the Spark endpoint and SparkBatch runs (~600 MB).
$(ENGINES)/spark/.installed: services/engines/requirements-spark.txt
	test -x $(ENGINES)/spark/bin/python || $(PYTHON) -m venv $(ENGINES)/spark
	$(ENGINES)/spark/bin/pip install -q -r services/engines/requirements-spark.txt
	touch $@

engines-spark: $(ENGINES)/spark/.installed

# The JVM fallback's environment: Apache Spark 4.2 (pyspark, ~500 MB; Java 17).
$(ENGINES)/spark-jvm/.installed: services/engines/requirements-spark-jvm.txt
	test -x $(ENGINES)/spark-jvm/bin/python || $(PYTHON) -m venv $(ENGINES)/spark-jvm
	$(ENGINES)/spark-jvm/bin/pip install -q -r services/engines/requirements-spark-jvm.txt
	touch $@

engines-spark-jvm: $(ENGINES)/spark-jvm/.installed

# The engine tests that are too slow for `make test` (the JVM Spark Connect server).
test-engines: venv engines-spark engines-spark-jvm
	LOAM_TEST_ENGINES=1 $(BIN)/python -m pytest -q tests/engines

proto: venv
	rm -rf $(PROTO_OUT) && mkdir -p $(PROTO_OUT)
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) \
		--plugin=protoc-gen-connectrpc=$(BIN)/protoc-gen-connectrpc \
		--connectrpc_out=$(PROTO_OUT) --connectrpc_opt=protobuf=google,io=async \
		$$(find proto -name '*.proto' | sort)
	find $(PROTO_OUT) -name '*.py*' -exec sed -i 's/^from loam\.jobs\.v1 import/from loam_common.gen.loam.jobs.v1 import/' {} +
	for d in $$(find $(PROTO_OUT) -type d); do touch $$d/__init__.py; done

# The contract follows buf's STANDARD lint rules (buf.yaml); Python follows ruff.toml;
# the import contracts between the packages are .importlinter's.
lint: venv
	$(BIN)/buf lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python tools/check_imports.py

# CI: generated code must match proto/.
proto-check: proto
	git diff --exit-code -- $(PROTO_OUT) || (echo "generated code is stale: run make proto and commit" && exit 1)

# @loam/bullmq (adapters/bullmq, TypeScript): its Connect client is generated from proto/
# too (`npm run gen`); the check regenerates into a scratch folder and diffs.
BULLMQ := adapters/bullmq

$(BULLMQ)/node_modules/.package-lock.json: $(BULLMQ)/package-lock.json
	cd $(BULLMQ) && npm ci --no-audit --no-fund

bullmq-gen: $(BULLMQ)/node_modules/.package-lock.json
	cd $(BULLMQ) && npm run gen

bullmq-gen-check: $(BULLMQ)/node_modules/.package-lock.json
	cd $(BULLMQ) && npm run gen:check

# Our own BullMQ tests: real Queue/Worker/FlowProducer/QueueEvents against a `loam dev`
# the test setup starts (needs .venv for the server).
test-bullmq: venv $(BULLMQ)/node_modules/.package-lock.json
	cd $(BULLMQ) && npm run gen:check && npm run typecheck && npm test

# @loam/durable (adapters/durable): Resonate's TypeScript SDK through loamResonate, with
# workers in separate processes against a `loam dev` its test setup starts; the spec's
# BullMQ example runs on @loam/bullmq, so that package's modules are installed too.
DURABLE_TS := adapters/durable

$(DURABLE_TS)/node_modules/.package-lock.json: $(DURABLE_TS)/package-lock.json
	cd $(DURABLE_TS) && npm ci --no-audit --no-fund

test-durable-ts: venv $(DURABLE_TS)/node_modules/.package-lock.json $(BULLMQ)/node_modules/.package-lock.json
	cd $(DURABLE_TS) && npm run typecheck && npm test

bench-bullmq: venv $(BULLMQ)/node_modules/.package-lock.json
	cd $(BULLMQ) && npm run bench

# The web console (console/, a TypeScript single-page app served by the gateway at
# /console): its API types are generated from the gateway's own /openapi.json, then
# type-checked and bundled by esbuild into console/dist (the build fails over its size
# budget). `console-gen-check` fails when the committed openapi.json or types are stale.
CONSOLE := console

$(CONSOLE)/node_modules/.package-lock.json: $(CONSOLE)/package-lock.json
	cd $(CONSOLE) && npm ci --no-audit --no-fund

console-gen: venv $(CONSOLE)/node_modules/.package-lock.json
	$(BIN)/python $(CONSOLE)/scripts/openapi.py
	cd $(CONSOLE) && npm run --silent gen

console-gen-check: console-gen
	git diff --exit-code -- $(CONSOLE)/openapi.json $(CONSOLE)/src/api.gen.ts || \
		(echo "the console's API types are stale: run make console and commit" && exit 1)

console: console-gen
	cd $(CONSOLE) && npm run --silent typecheck && npm run --silent build

# Debian's Chromium, which the console's browser tests drive through playwright-core.
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The console end to end: one `loam dev` (auth on) with real jobs and one Chromium for
# every test (console/test/).
test-console: console chromium
	cd $(CONSOLE) && LOAM_PYTHON=$(abspath $(BIN)/python) npm test

# The console over a queue of 100,000 jobs (bulk-enqueued through the SDK): paged, searched
# and a job opened, in Chromium (a few minutes; `make test-console` runs it with 5,000).
test-console-scale: console chromium
	cd $(CONSOLE) && LOAM_PYTHON=$(abspath $(BIN)/python) CONSOLE_SCALE_JOBS=$${CONSOLE_SCALE_JOBS:-100000} \
		node --test --test-name-pattern='jobs: page by cursor' test/history.test.mjs

# The same run, saving the main pages as PNGs into docs/console/ (for docs/console.md).
console-screenshots: console chromium
	cd $(CONSOLE) && LOAM_PYTHON=$(abspath $(BIN)/python) CONSOLE_SCREENSHOTS=$(abspath docs/console) npm test

# The console's speed bars (1,000 queues; a 50-row page over 1,000,000 jobs; SSE to the
# page): bench/console_bench.mjs, figures into bench/results/console.json.
bench-console: console chromium
	LOAM_PYTHON=$(abspath $(BIN)/python) node bench/console_bench.mjs $(BENCH_ARGS)

# The REST job list alone (a 50-row page over 1,000,000 jobs), this tree against another
# checkout's with BENCH_ARGS="--before /path/to/other/.venv/bin/python": bench/console_list_bench.py.
bench-console-list: venv
	$(BIN)/python bench/console_list_bench.py $(BENCH_ARGS)

# docker-compose.yml on paper (no Docker engine runs here): Debian's docker-compose parses
# and checks it. The internal token only has to be set for interpolation.
compose-check:
	command -v docker-compose >/dev/null || (apt-get update -qq && apt-get install -y -qq docker-compose)
	LOAM_INTERNAL_TOKEN=compose-check docker-compose -f docker-compose.yml config -q

# `loam dev`: every service in one process on ./.loam (Ctrl-C stops it).
dev: venv
	$(MAKE) console || echo "the console was not built (it needs npm); the server runs without it"
	$(BIN)/loam dev

test: venv engines-flink engines-spark engines-spark-jvm
	$(BIN)/python -m pytest -q
	$(MAKE) test-bullmq
	$(MAKE) test-durable-ts
	$(MAKE) test-console

# The chaos soak (tests/chaos/soak.py): the split deployment under a steady mixed load (jobs,
# a FIFO queue, durable workflows on a Resonate SDK worker) for 10 minutes with process
# faults and server clock jumps on, its history checked; prints the checker's figures and
# each process's memory and file descriptors. LOAM_SOAK_S=60 for a shorter run.
test-chaos: venv
	$(BIN)/python tests/chaos/soak.py

# Flink (issue 21): the apache-flink wheel carries a whole Flink distribution; it gets its own
# virtualenv, never .venv (its pins: apache-beam, pandas, numpy, pyarrow). Java 17 runs it.
FLINK_VENV := .engines/flink
FLINK_VERSION := 2.3.0

$(FLINK_VENV)/.installed: Makefile
	command -v javac >/dev/null || (apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless)
	test -x $(FLINK_VENV)/bin/python || $(PYTHON) -m venv $(FLINK_VENV)
	$(FLINK_VENV)/bin/pip install -q apache-flink==$(FLINK_VERSION)
	touch $@

engines-flink: $(FLINK_VENV)/.installed

# The long Flink lifecycle tests (a few minutes on 2 cores); `make test` runs the short ones,
# which prove each action once on one shared session cluster (the table in
# tests/engines/flink/conftest.py says which test proves what, and which are long).
test-engines-flink: venv engines-flink
	LOAM_FLINK_LONG=1 $(BIN)/python -m pytest -q -p no:randomly tests/engines/flink

bench-flink: venv engines-flink
	$(BIN)/python bench/flink_bench.py

bench: venv
	$(BIN)/python bench/core_bench.py

# Celery's own integration suite against loam:// (adapters/celery/conformance/run.sh;
# it fetches Celery's sdist and starts redis-server as the suite's side channel). CI runs
# the bounded set below (~2 min); CELERY_IT="test_tasks test_canvas test_inspect
# test_worker test_beat" is the whole of it (~12 min).
CELERY_IT ?= test_inspect test_worker test_beat
celery-conformance: venv
	FILES="$(CELERY_IT)" adapters/celery/conformance/run.sh

# Loam next to Celery (Redis, RabbitMQ) and BullMQ (Redis, Postgres): installs what is
# missing (apt, pip, npm), starts and stops every system itself; bench/results/latest.*.
bench-anchors: venv
	$(BIN)/python bench/harness.py $(BENCH_ARGS)

# Loam on CPython built as production Pythons are (PGO + LTO; docs/decisions/0057): the
# interpreter in .python-pgo (built once, ~15 min on 2 cores), the project in .venv-pgo.
# A benchmark runs on it when started with it: `.venv-pgo/bin/python bench/harness.py`.
PGO_PYTHON := .python-pgo/bin/python3.12
$(PGO_PYTHON):
	tools/build-python-pgo.sh $(abspath .python-pgo)

venv-pgo: $(PGO_PYTHON)
	$(MAKE) venv VENV=.venv-pgo PYTHON=$(abspath $(PGO_PYTHON))

# What CI keeps working (tests/bench runs it too): Loam only, a few hundred jobs.
bench-smoke: venv
	$(BIN)/python bench/harness.py --smoke --out $${TMPDIR:-/tmp}/loam-bench-smoke

clean:
	rm -rf $(VENV) .loam $(CONSOLE)/dist
