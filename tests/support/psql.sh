# SPDX-License-Identifier: MIT
# Shared by the shell tests that run psql (source it): sets psql_bin to $PSQL, else psql on
# PATH, else Debian's PostgreSQL 15 psql.
# shellcheck shell=bash
psql_bin=${PSQL:-}
if [[ -z "$psql_bin" ]]; then
    if command -v psql >/dev/null 2>&1; then psql_bin=psql; else psql_bin=/usr/lib/postgresql/15/bin/psql; fi
fi
