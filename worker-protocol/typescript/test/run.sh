#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the TypeScript SDK (npm ci when node_modules is missing or older than the lock file,
# then tsc, strict) and runs its tests with node:test, in TAP. The build step also lints
# (eslint.config.js: typescript-eslint's type-checked rules).
#   test/run.sh          build, then test (meson test typescript_sdk)
#   test/run.sh build    build only (scripts/test does it once, before both builds' tests)
# The tests that need a runner skip without CAIRN_TEST_DATABASE_URL, CAIRN_RUNNER, CAIRNCTL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ! -d node_modules || package-lock.json -nt node_modules ]]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
fi
# Built when asked, or when a source is newer than the build: the tests of the two builds that
# scripts/test runs at once then share the one build it made first.
if [[ "${1:-}" == build || ! -f dist/index.js ||
      -n $(find src tsconfig.json package.json -newer dist/index.js -print -quit) ]]; then
    npx --no-install tsc -p tsconfig.json >&2
fi
if [[ "${1:-}" == build ]]; then
    exec npx --no-install eslint --max-warnings 0 . >&2
fi
exec node --test --test-reporter=./test/tap-reporter.mjs test/*.test.mjs
