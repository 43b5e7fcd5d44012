-- SPDX-License-Identifier: MIT
-- 0016: least-privilege roles (docs/operations.md "Roles").
--
-- Three kinds of database user:
--   * the migration role, which runs `cairnctl migrate` and owns the schema: the only one that
--     may create, alter or drop anything in it;
--   * cairn_runner, for cairn-runner processes: reads and writes every table's rows, calls every
--     function, but changes no table's shape;
--   * cairn_app, for cairnctl and applications using the SQL API: the same on the rows of the
--     workflow and instance tables, read-only on the fleet table (cairn.runners), and no more.
-- Both are NOLOGIN group roles: grant them to login roles (`CREATE ROLE billing_app LOGIN IN
-- ROLE cairn_app`). Roles belong to the whole PostgreSQL cluster, not to one database: the
-- creation below tolerates another database (or a concurrent migration) having made them.

DO $$
BEGIN
    BEGIN
        CREATE ROLE cairn_app NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
    END;
    BEGIN
        CREATE ROLE cairn_runner NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
    END;
END
$$;

REVOKE ALL ON SCHEMA cairn FROM PUBLIC;
GRANT USAGE ON SCHEMA cairn TO cairn_app, cairn_runner;

-- Rows, not shapes: no TRUNCATE, REFERENCES or TRIGGER, and no DDL (only an owner has that).
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO cairn_app, cairn_runner;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA cairn TO cairn_app, cairn_runner;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cairn TO cairn_app, cairn_runner;
-- Which migrations ran is the migration role's business; the others may read it (the runner
-- checks that the schema is the one it knows).
REVOKE INSERT, UPDATE, DELETE ON cairn.schema_migrations FROM cairn_app, cairn_runner;
-- The fleet table is written by the runners about themselves.
REVOKE INSERT, UPDATE, DELETE ON cairn.runners FROM cairn_app;

-- What later migrations create gets the same grants (they may narrow them).
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cairn_app, cairn_runner;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT USAGE, SELECT ON SEQUENCES TO cairn_app, cairn_runner;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT EXECUTE ON FUNCTIONS TO cairn_app, cairn_runner;
