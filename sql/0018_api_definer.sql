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

-- The role whose view the API's functions take: the SET ROLE target, else the login.
CREATE FUNCTION cairn.api_caller() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('role') <> 'none' THEN current_setting('role')
                ELSE session_user::text END
$$;

-- 0017's acting tenant, inside the API's functions that of their caller. (No FROM: the planner
-- inlines it. A SQL function it cannot inline is planned again for every statement that calls
-- it, which made an enqueue five times slower.)
CREATE OR REPLACE FUNCTION cairn.acting_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_user = 'cairn_api'
                THEN CASE WHEN cairn.api_caller() LIKE 'cairn\_tenant\_%'
                          THEN substr(cairn.api_caller(), 14) END
                WHEN current_user::text LIKE 'cairn\_tenant\_%'
                THEN substr(current_user::text, 14) END
$$;

-- What the caller of an API function sees: the tenant it acts as; '*' (every tenant) for a
-- runner or one who may create in the schema (its owner, superusers), whom row security does
-- not restrict or whose policies show everything; NULL (nothing) for a tenant's login acting
-- as no tenant; else (cairn_app's members) `default`. PL/pgSQL, called once per statement by
-- the policies below: as inlined SQL expressions the same tests cost a few microseconds more
-- in each of the ~9 statements of an enqueue (bench/HISTORY.md, "Tenants").
CREATE FUNCTION cairn.api_scope() RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r name := cairn.api_caller();
BEGIN
    IF r LIKE 'cairn\_tenant\_%' THEN
        RETURN substr(r, 14);
    END IF;
    IF pg_has_role(r, 'cairn_runner', 'USAGE') OR has_schema_privilege(r, 'cairn', 'CREATE') THEN
        RETURN '*';
    END IF;
    IF pg_has_role(r, 'cairn_tenant', 'USAGE') THEN
        RETURN NULL;
    END IF;
    RETURN 'default';
END
$$;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['workflow_versions', 'runner_instances', 'schedules', 'backfills',
                             'workflow_limits', 'workflow_retention'] LOOP
        -- (SELECT ...): evaluated once per statement, not once per row
        EXECUTE format('CREATE POLICY api_caller ON cairn.%I TO cairn_api'
                       ' USING ((SELECT cairn.api_scope()) IN (tenant_id, ''*''))'
                       ' WITH CHECK ((SELECT cairn.api_scope()) IN (tenant_id, ''*''))', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['queued_instances', 'runner_actions_done', 'instance_history'] LOOP
        EXECUTE format('ALTER POLICY instance_visible ON cairn.%I'
                       ' TO cairn_tenant, cairn_app, cairn_api', t);
    END LOOP;
END
$$;
CREATE POLICY api_caller ON cairn.tenants FOR SELECT TO cairn_api
    USING ((SELECT cairn.api_scope()) IN (name, '*'));
-- 0017's restrictive queue_tenant policy is not extended to cairn_api: the queue's insert
-- trigger sets a row's tenant from its instance, and no function writes the column otherwise,
-- so checking it again would cost an index probe per queue row written (each enqueue, each row
-- cairn.limit_mark re-marks) for nothing.

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

-- What `cairnctl register` wrote itself: a version of a workflow of the caller's tenant (the
-- same statement; an existing version is left alone and nothing is returned).
CREATE FUNCTION cairn.register_version(p_name text, p_version text, p_graph bytea,
                                       p_source text, p_timeout_ms bigint, p_inputs text[])
RETURNS TABLE (id uuid, workflow_version text, ir_hash text)
LANGUAGE sql AS $$
    WITH h AS (SELECT encode(sha256(p_graph), 'hex') AS ir_hash)
    INSERT INTO cairn.workflow_versions AS v (workflow_name, workflow_version, ir_hash, source,
                                              timeout_ms, inputs)
    SELECT p_name, coalesce(p_version, left(h.ir_hash, 12)), h.ir_hash, p_source,
           nullif(p_timeout_ms, 0), p_inputs
      FROM h
    ON CONFLICT ON CONSTRAINT workflow_versions_name DO NOTHING
    RETURNING v.id, v.workflow_version, v.ir_hash
$$;

-- What `cairnctl schedule add` wrote itself: the first slot, when the schedule has none yet
-- (so that `schedule list` shows it at once; a runner computes it too).
CREATE FUNCTION cairn.schedule_first(p_name text, p_at timestamptz) RETURNS boolean
LANGUAGE sql AS $$
    WITH u AS (UPDATE cairn.schedules SET next_at = p_at
                WHERE name = p_name AND tenant_id = cairn.current_tenant() AND next_at IS NULL
               RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM u)
$$;

-- The API's writing functions run as cairn_api. search_path is fixed (pg_temp last), as for
-- any SECURITY DEFINER function: a caller's temporary objects must not stand in for ours.
-- cairn_api may create in the schema only while it is handed the functions.
GRANT CREATE ON SCHEMA cairn TO cairn_api;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
         WHERE p.pronamespace = 'cairn'::regnamespace
           AND p.proname = ANY (ARRAY[
               'enqueue', 'cancel', 'retry', 'register_version',
               'schedule_add', 'schedule_first', 'schedule_pause', 'schedule_resume',
               'schedule_delete', 'schedule_trigger',
               'backfill_create', 'backfill_pause', 'backfill_resume', 'backfill_cancel',
               'backfill_retry_failed',
               'limit_set', 'limit_delete', 'retention_set', 'prune_batch'])
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER'
                       ' SET search_path = pg_catalog, cairn, pg_temp', f);
        EXECUTE format('ALTER FUNCTION %s OWNER TO cairn_api', f);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO cairn_app, cairn_tenant, cairn_runner',
                       f);
    END LOOP;
END
$$;
REVOKE CREATE ON SCHEMA cairn FROM cairn_api;
