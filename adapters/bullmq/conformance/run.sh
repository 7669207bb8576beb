#!/usr/bin/env bash
# Runs BullMQ's shared test suite against Loam (`loam dev`), given a BullMQ checkout:
#
#   adapters/bullmq/conformance/run.sh /path/to/bullmq [file.test.ts ...]
#
# The checkout is BullMQ's code and stays outside this repository. The script installs
# its dev dependencies once (lint/docs/release tooling left out, ioredis added for the
# suite's imports), generates its Lua command modules, copies our setup/config into it,
# and runs each test file in its own vitest process against its own `loam dev`
# (CONFORMANCE_JOBS at a time, default 2). Results go to $RESULTS (default
# <checkout>/loam-results); excluded.txt lists the tests left out of the counts, with
# the reason for each.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
adapter="$(cd "$here/.." && pwd)"
bull="${1:?usage: run.sh /path/to/bullmq-checkout [file.test.ts ...]}"
shift || true
bull="$(cd "$bull" && pwd)"
results="${RESULTS:-$bull/loam-results}"
jobs="${CONFORMANCE_JOBS:-2}"

test -f "$bull/src/utils/create-backend.ts" || { echo "$bull is not a BullMQ v6 checkout" >&2; exit 2; }
test -d "$adapter/node_modules" || (cd "$adapter" && npm ci --no-audit --no-fund)

if [ ! -d "$bull/node_modules/vitest" ]; then
  (cd "$bull" && node -e '
    const fs = require("fs"); const p = require("./package.json");
    const drop = /eslint|semantic-release|vitepress|typedoc|madge|husky|commitlint|prettier|lint-staged|@semantic|coveralls|mocha|bun-types|@valkey|^redis$|^pg$|^@types\/pg|pretty-quick/;
    for (const k of Object.keys(p.devDependencies || {})) if (drop.test(k)) delete p.devDependencies[k];
    p.devDependencies.ioredis = p.devDependencies.ioredis || "^5.4.0";
    delete p.scripts.prepare;
    fs.writeFileSync("package.json", JSON.stringify(p, null, 2));' \
   && npm install --ignore-scripts --no-audit --no-fund)
fi
if [ ! -d "$bull/src/scripts" ]; then
  (cd "$bull" && npm run clean:scripts && npm run generate:raw:scripts && npm run transform:commands) >/dev/null
fi

sed "s#__LOAM_BACKEND__#$adapter/src/backend.ts#" "$here/vitest.loam.setup.ts" > "$bull/vitest.loam.setup.ts"
sed "s#__LOAM_DEV__#$adapter/test/loam-dev.ts#" "$here/vitest.loam.global-setup.ts" > "$bull/vitest.loam.global-setup.ts"
cp "$here/vitest.loam.config.ts" "$bull/vitest.loam.config.ts"

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(worker job flow job_scheduler getters clean queue telemetry_interface deduplication rate_limiter
         job_cancellation job_cancellation_advanced lock_manager events stalled_jobs pause delay concurrency
         job_scheduler_stress metrics obliterate bulk)
fi
rm -rf "$results" && mkdir -p "$results"
export LOAM_BIN="${LOAM_BIN:-$(cd "$adapter/../.." && pwd)/.venv/bin/loam}"
unset LOAM_URL LOAM_JOBS_URL
printf '%s\n' "${files[@]}" | sed 's/\.test\.ts$//' | xargs -P "$jobs" -I{} sh -c \
  'cd "$0" && timeout 3600 npx vitest run --config vitest.loam.config.ts "tests/{}.test.ts" \
     --reporter=json --outputFile="$1/{}.json" > "$1/{}.log" 2>&1; echo "done {}"' "$bull" "$results"
node "$here/summarize.mjs" "$results" "$here/excluded.txt"
