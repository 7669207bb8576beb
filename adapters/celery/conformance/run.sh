#!/usr/bin/env bash
# Celery's own integration suite (t/integration of Celery's sdist) against Loam:
# TEST_BROKER and TEST_BACKEND are loam:// URLs; Redis is only the suite's side
# channel (REDIS_HOST/REDIS_PORT), never the broker or the backend.
#
#   adapters/celery/conformance/run.sh [pytest args...]      (from anywhere)
#
# Env: CELERY_VERSION (default: the installed one), FILES (default: test_tasks
# test_canvas test_inspect test_worker test_beat), WORK (default: a temp dir),
# IT_TIMEOUT (per test, s; default 120). Tests that cannot apply to a broker and result
# backend other than Redis/AMQP are deselected from excluded.txt (one per line, with
# the reason after `#`). Starts its own `loam dev` and redis-server on free ports and
# stops both (by pid) on exit. Exits with pytest's status.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
PY="$ROOT/.venv/bin/python"
VERSION="${CELERY_VERSION:-$("$PY" -c 'import celery; print(celery.__version__)')}"
FILES="${FILES:-test_tasks test_canvas test_inspect test_worker test_beat}"
WORK="${WORK:-$(mktemp -d -t loam-celery-it-XXXX)}"
mkdir -p "$WORK"

command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
# The suite's own test dependencies (its requirements/test.txt, the parts it imports).
"$PY" -m pip install -q "celery==$VERSION" redis pytest-rerunfailures pytest-subtests pytest-timeout \
    pydantic cryptography sqlalchemy 2>&1 | grep -v '^WARNING' || true

if [ ! -d "$WORK/celery-$VERSION/t/integration" ]; then
    (cd "$WORK" && "$PY" -m pip download -q --no-binary :all: --no-deps "celery==$VERSION" 2>&1 | grep -v '^WARNING' || true)
    tar -xzf "$WORK/celery-$VERSION.tar.gz" -C "$WORK"
fi
SRC="$WORK/celery-$VERSION"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
LOAM_PORT=$(free_port); REDIS_PORT=$(free_port)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >"$WORK/redis.log" 2>&1 &
pids+=($!)
"$PY" -m loam_gateway.dev --port "$LOAM_PORT" --data "$WORK/loam-data" >"$WORK/loam.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    grep -q ready "$WORK/loam.log" 2>/dev/null && break
    sleep 0.1
done

NS="it-$(date +%s)"
export TEST_BROKER="loam://127.0.0.1:$LOAM_PORT/$NS" TEST_BACKEND="loam://127.0.0.1:$LOAM_PORT/$NS"
export REDIS_HOST=127.0.0.1 REDIS_PORT
export PATH="$ROOT/.venv/bin:$PATH"  # test_worker runs the `celery` command
# The suite's Celery app reads this file from its rootdir: short leases so that lost
# workers' tasks come back quickly.
echo '{"broker_transport_options": {"visibility_timeout": 10}}' >"$SRC/integration-tests-config.json"

deselect=()
while read -r line; do
    id="${line%%#*}"; id="$(echo "$id" | xargs)"
    [ -n "$id" ] && deselect+=(--deselect "t/integration/$id")
done <"$HERE/excluded.txt"

paths=()
for f in $FILES; do paths+=("t/integration/$f.py"); done
cd "$SRC"
set +e
"$PY" -m pytest -p celery.contrib.pytest -p loam_celery -p no:cacheprovider -q -rfE \
    --timeout="${IT_TIMEOUT:-120}" --junitxml="$WORK/junit.xml" "${deselect[@]}" "${paths[@]}" "$@"
status=$?
set -e
echo "conformance: junit in $WORK/junit.xml, logs in $WORK"
exit $status
