-- SPDX-License-Identifier: MIT
-- 0022: the SQL API is defined once, in sql/api/ (sql/README.md).
--
-- The numbered migrations keep what changes data or shapes (tables, columns, indexes,
-- constraints, roles, table rights, data moves, the dropping of an old signature); the API's
-- functions, triggers, views, policies and the column defaults that call them live in the files
-- of sql/api/, which always hold their current definitions and are applied after the numbered
-- migrations, in the same transaction, whenever one was applied or a file changed. This table
-- records what was applied last: a file's name and the SHA-256 of its text, so that a migrate
-- with nothing new does not touch the schema (re-creating a policy locks its table).
CREATE TABLE cairn.schema_api (
    file text PRIMARY KEY,
    sha256 text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- As the migrations' own record: the owner's to write, everyone's to read.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON cairn.schema_api
    FROM cairn_app, cairn_runner, cairn_tenant, cairn_api;
