# The two commands of the README: `make dev` and `make test`. Both build .venv first.
PYTHON ?= $(shell pyenv root 2>/dev/null)/versions/$(shell cat .python-version)/bin/python
ifeq ($(wildcard $(PYTHON)),)
PYTHON := python3.12
endif
VENV := .venv
BIN := $(VENV)/bin
PROTO_OUT := libs/common/src/loam_common/gen

ENGINES := .engines

.PHONY: engines-spark engines-spark-jvm test-engines venv dev test proto proto-check lint compose-check bench celery-conformance bench-anchors bench-smoke clean test-bullmq bullmq-gen bullmq-gen-check bench-bullmq

PACKAGES := libs/common services/queue-core services/sweeper services/relay services/gateway services/engines adapters/python adapters/celery

$(BIN)/.installed: $(addsuffix /pyproject.toml,$(PACKAGES)) requirements-dev.txt
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

bench-bullmq: venv $(BULLMQ)/node_modules/.package-lock.json
	cd $(BULLMQ) && npm run bench

# docker-compose.yml on paper (no Docker engine runs here): Debian's docker-compose parses
# and checks it. The internal token only has to be set for interpolation.
compose-check:
	command -v docker-compose >/dev/null || (apt-get update -qq && apt-get install -y -qq docker-compose)
	LOAM_INTERNAL_TOKEN=compose-check docker-compose -f docker-compose.yml config -q

# `loam dev`: every service in one process on ./.loam (Ctrl-C stops it).
dev: venv
	$(BIN)/loam dev

test: venv engines-spark engines-spark-jvm
	$(BIN)/python -m pytest -q
	$(MAKE) test-bullmq

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

# What CI keeps working (tests/bench runs it too): Loam only, a few hundred jobs.
bench-smoke: venv
	$(BIN)/python bench/harness.py --smoke --out $${TMPDIR:-/tmp}/loam-bench-smoke

clean:
	rm -rf $(VENV) .loam
