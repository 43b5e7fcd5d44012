-- SPDX-License-Identifier: MIT
-- 10_tenants.sql
--
-- Tenants (docs/operations.md "Tenants"): who a statement acts for, making tenants and their
-- quotas, the parent check, and the column defaults that give new rows the caller's tenant.
-- A tenant T is the role cairn_tenant_T; row security (80_row_security.sql) does the isolation.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- The role whose view the API's functions take: the SET ROLE target, else the login.
CREATE OR REPLACE FUNCTION cairn.api_caller() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('role') <> 'none' THEN current_setting('role')
                ELSE session_user::text END
$$;

-- The tenant the role in use acts as (cairn_tenant_T: T), NULL for any other role; inside the
-- API's functions (run as cairn_api), that of their caller. (No FROM: the planner inlines it. A
-- SQL function it cannot inline is planned again for every statement that calls it, which made
-- an enqueue five times slower.)
CREATE OR REPLACE FUNCTION cairn.acting_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_user = 'cairn_api'
                THEN CASE WHEN cairn.api_caller() LIKE 'cairn\_tenant\_%'
                          THEN substr(cairn.api_caller(), 14) END
                WHEN current_user::text LIKE 'cairn\_tenant\_%'
                THEN substr(current_user::text, 14) END
$$;

-- The tenant a statement works for: the one acted as, else `default` (the owner, the runners,
-- cairn_app's members). What names are looked up in and new rows get.
CREATE OR REPLACE FUNCTION cairn.current_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(cairn.acting_tenant(), 'default')
$$;

-- What the caller of an API function sees: the tenant it acts as; '*' (every tenant) for a
-- runner or one who may create in the schema (its owner, superusers), whom row security does
-- not restrict or whose policies show everything; NULL (nothing) for a tenant's login acting
-- as no tenant; else (cairn_app's members) `default`. PL/pgSQL, called once per statement by
-- the policies below: as inlined SQL expressions the same tests cost a few microseconds more
-- in each of the ~9 statements of an enqueue (bench/HISTORY.md, "Tenants").
CREATE OR REPLACE FUNCTION cairn.api_scope() RETURNS text
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

-- Makes a tenant and its role (run by the owner, or any role that may create roles and
-- administers cairn_tenant). Returns the role's name, to grant to the tenant's logins.
CREATE OR REPLACE FUNCTION cairn.tenant_create(p_name text, p_max_running integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_role text := 'cairn_tenant_' || p_name;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,47}$' THEN
        RAISE EXCEPTION 'cairn.tenant_create: "%" is not a tenant name', p_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a-z, 0-9 and _, from a letter, at most 48 characters.';
    END IF;
    IF p_max_running < 1 THEN
        RAISE EXCEPTION 'cairn.tenant_create: a quota must be at least 1 (got %)',
            p_max_running USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        INSERT INTO cairn.tenants (name, max_running) VALUES (p_name, p_max_running);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'cairn.tenant_create: tenant "%" exists', p_name
            USING ERRCODE = 'duplicate_object';
    END;
    BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN IN ROLE cairn_tenant', v_role);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        EXECUTE format('GRANT cairn_tenant TO %I', v_role); -- made by another database
    END;
    RETURN v_role;
END
$$;

-- Sets a tenant's quota on running instances (NULL: none), and re-marks each of its
-- workflows' unfinished instances under that workflow's advisory lock, as cairn.limit_set
-- does: a quota set while the tenant's instances are being enqueued misses none. Returns
-- whether the tenant exists. The owner's: applications cannot change the tenants table.
CREATE OR REPLACE FUNCTION cairn.tenant_quota(p_name text, p_max_running integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    w record;
BEGIN
    IF p_max_running < 1 THEN
        RAISE EXCEPTION 'cairn.tenant_quota: a quota must be at least 1 (got %)', p_max_running
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL removes the quota.';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    UPDATE cairn.tenants SET max_running = p_max_running WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR w IN SELECT DISTINCT v.workflow_name FROM cairn.workflow_versions v
              WHERE v.tenant_id = p_name ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(p_name, w.workflow_name));
        IF p_max_running IS NOT NULL THEN
            INSERT INTO cairn.workflow_limits (tenant_id, workflow_name)
            VALUES (p_name, w.workflow_name) ON CONFLICT DO NOTHING;
        END IF;
        PERFORM cairn.limit_mark(p_name, w.workflow_name);
        IF p_max_running IS NULL THEN
            -- the rows the quota made, when nothing else needs them: while any row exists,
            -- every claim goes through cairn.claim_limited
            DELETE FROM cairn.workflow_limits wl
             WHERE wl.tenant_id = p_name AND wl.workflow_name = w.workflow_name
               AND wl.max_running IS NULL AND wl.max_per_key = 1
               AND NOT EXISTS (SELECT 1 FROM cairn.queued_instances q
                                WHERE q.tenant_id = p_name AND q.limit_name = w.workflow_name);
        END IF;
    END LOOP;
    RETURN true;
END;
$$;

-- Runs with the writer's rights: under row security an application sees no parent of another
-- tenant, and a runner (which sees all) finds it of another tenant.
CREATE OR REPLACE FUNCTION cairn.parent_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.runner_instances p
                    WHERE p.instance_id = NEW.parent_id AND p.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'cairn: parent % of instance % is no instance of tenant %',
            NEW.parent_id, NEW.instance_id, NEW.tenant_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER runner_instances_parent_tenant
    BEFORE INSERT OR UPDATE OF parent_id, tenant_id ON cairn.runner_instances
    FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL) EXECUTE FUNCTION cairn.parent_tenant();

-- New rows take the tenant of the statement that writes them (existing rows got `default` when
-- the column was added, 0017). The queue's is set by its insert trigger from the instance.
ALTER TABLE cairn.workflow_versions ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.runner_instances ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.schedules ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.backfills ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.workflow_limits ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.workflow_retention ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
