-- SPDX-License-Identifier: MIT
-- 0001: the cairn schema and the migration bookkeeping table. The workflow tables come in later
-- migrations (docs/operations.md describes them). Applied once, in one transaction, by scripts/migrate-sql (and
-- later `cairnctl migrate`), which record each applied file's NNNN in cairn.schema_migrations.
CREATE SCHEMA IF NOT EXISTS cairn;

CREATE TABLE IF NOT EXISTS cairn.schema_migrations (
    version text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
