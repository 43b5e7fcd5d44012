-- SPDX-License-Identifier: MIT
-- 0018: applications read the tables and write through the SQL API (docs/operations.md
-- "Tenants", "Roles").
--
-- Until 0017 an application role (cairn_app, a tenant's role) wrote rows itself, row security
-- keeping it to its own tenant's. That left a tenant's hand-written SQL free to rewrite what
-- the runners schedule its own rows by (a running instance's queue row deleted frees a slot of
-- its quota; its limits marks rewritten skip its limits) and to take locks the runners wait for
-- (SELECT ... FOR UPDATE needs UPDATE's right, LOCK TABLE ... EXCLUSIVE DELETE's).
--
-- Now applications have SELECT alone on the tables, row security unchanged, and write through
-- the API's functions, which run as the role cairn_api (SECURITY DEFINER). cairn_api is under
-- row security too, with policies that give it the view of the role that called the function:
--   * the runners and the schema owner: every tenant;
--   * a tenant's role in use (SET ROLE cairn_tenant_T): tenant T;
--   * a member of cairn_app: tenant `default`;
--   * a member of cairn_tenant acting as no tenant: nothing.
-- The caller is current_setting('role') (what SET ROLE chose: only a role one is a member of)
-- or, without SET ROLE, the session's login; a SECURITY DEFINER function cannot SET ROLE. So
-- the functions' bodies keep the tenant lookups of 0017 and act exactly as they did, for the
-- same callers, without an application holding the rights they use.

DO $$
BEGIN
    BEGIN
        CREATE ROLE cairn_api NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL; -- made by another database of the cluster
    END;
END
$$;
-- The migrating role must be able to act as cairn_api to make it the functions' owner (and to
-- replace them in later migrations).
GRANT cairn_api TO CURRENT_USER;

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.api_caller, cairn.acting_tenant, cairn.api_scope (sql/api/10_tenants.sql);
-- cairn.register_version (sql/api/20_instances.sql); cairn.schedule_first
-- (sql/api/40_schedules.sql).

-- cairn_api's policies (the view of its caller) are in sql/api/80_row_security.sql.

-- cairn_api's rights: what the functions write. Not the migrations' record, the runners'
-- registry or the tenants (the owner's).
GRANT USAGE ON SCHEMA cairn TO cairn_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO cairn_api;
REVOKE INSERT, UPDATE, DELETE ON cairn.schema_migrations, cairn.runners, cairn.tenants
    FROM cairn_api;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA cairn TO cairn_api;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cairn_api;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn GRANT USAGE ON SEQUENCES TO cairn_api;

-- Applications: SELECT alone (a table-level REVOKE takes 0017's column rights with it), and no
-- sequences (nothing of theirs draws from one now).
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA cairn
    FROM cairn_app, cairn_tenant;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA cairn FROM cairn_app, cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON TABLES FROM cairn_app, cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    REVOKE ALL ON SEQUENCES FROM cairn_app, cairn_tenant;

-- The API's writing functions (SECURITY DEFINER) are owned by cairn_api; sql/api/90_api_owner.sql
-- hands them over each time the API is applied.
