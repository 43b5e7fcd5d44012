-- SPDX-License-Identifier: MIT
-- 80_row_security.sql
--
-- Row security: who sees and writes which tenant's rows (docs/operations.md "Tenants"), every
-- policy of the schema. Applied whole each time: the policies on cairn's tables are dropped
-- first, so that this file is all there is and a policy removed here is gone from the database.
--
-- A role in no group below sees no row of these tables. The owner, who runs migrations,
-- bypasses row security (it is not FORCEd).
--   * cairn_tenant's members: the rows of the tenant they act as (SET ROLE cairn_tenant_T); one
--     that has not SET ROLE to a tenant acts as none and sees nothing;
--   * cairn_app's members: the tenant `default`;
--   * cairn_runner: every tenant (runners run every tenant's instances);
--   * cairn_api (the owner of the API's SECURITY DEFINER functions): the view of the role that
--     called the function (cairn.api_scope()), so a function does for a caller only what the
--     caller's own view allows.
-- Tables with a tenant_id are filtered by it; the queue, the results and the history by their
-- instance, whose own policies decide. (SELECT f()): evaluated once per statement, not per row.

DO $$
DECLARE
    p record;
    t text;
BEGIN
    FOR p IN SELECT pol.polname, pol.polrelid::regclass AS tbl FROM pg_policy pol
               JOIN pg_class c ON c.oid = pol.polrelid
              WHERE c.relnamespace = 'cairn'::regnamespace LOOP
        EXECUTE format('DROP POLICY %I ON %s', p.polname, p.tbl);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['workflow_versions', 'runner_instances', 'schedules', 'backfills',
                             'workflow_limits', 'workflow_retention', 'events'] LOOP
        EXECUTE format('ALTER TABLE cairn.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY acting_tenant ON cairn.%I TO cairn_tenant'
                       ' USING (tenant_id = (SELECT cairn.acting_tenant()))'
                       ' WITH CHECK (tenant_id = (SELECT cairn.acting_tenant()))', t);
        EXECUTE format('CREATE POLICY default_tenant ON cairn.%I TO cairn_app'
                       ' USING (tenant_id = ''default'') WITH CHECK (tenant_id = ''default'')',
                       t);
        EXECUTE format('CREATE POLICY every_tenant ON cairn.%I TO cairn_runner'
                       ' USING (true) WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY api_caller ON cairn.%I TO cairn_api'
                       ' USING ((SELECT cairn.api_scope()) IN (tenant_id, ''*''))'
                       ' WITH CHECK ((SELECT cairn.api_scope()) IN (tenant_id, ''*''))', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['queued_instances', 'runner_actions_done', 'instance_history',
                             'signals', 'waits', 'event_reads', 'published',
                             'signal_tokens'] LOOP
        EXECUTE format('ALTER TABLE cairn.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY instance_visible ON cairn.%I'
                       ' TO cairn_tenant, cairn_app, cairn_api'
                       ' USING (EXISTS (SELECT 1 FROM cairn.runner_instances ri'
                       '                 WHERE ri.instance_id = %I.instance_id))'
                       ' WITH CHECK (EXISTS (SELECT 1 FROM cairn.runner_instances ri'
                       '                      WHERE ri.instance_id = %I.instance_id))', t, t, t);
        EXECUTE format('CREATE POLICY every_tenant ON cairn.%I TO cairn_runner'
                       ' USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

-- The queue's own tenant column is what the fair claim and the quotas count by: an application
-- may not write another tenant's name into a row of its own. Not extended to cairn_api: the
-- queue's insert trigger sets a row's tenant from its instance, and no function writes the
-- column otherwise, so checking it again would cost an index probe per queue row written (each
-- enqueue, each row cairn.limit_mark re-marks) for nothing.
CREATE POLICY queue_tenant ON cairn.queued_instances AS RESTRICTIVE TO cairn_tenant, cairn_app
    USING (true) WITH CHECK (tenant_id = (SELECT cairn.current_tenant()));

-- The tenants themselves: each sees its own row; only the owner changes them (a runner locks a
-- tenant's row while it counts the tenant's slots: table rights, 0017).
ALTER TABLE cairn.tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY acting_tenant ON cairn.tenants FOR SELECT TO cairn_tenant
    USING (name = (SELECT cairn.acting_tenant()));
CREATE POLICY default_tenant ON cairn.tenants FOR SELECT TO cairn_app
    USING (name = 'default');
CREATE POLICY every_tenant ON cairn.tenants TO cairn_runner USING (true) WITH CHECK (true);
CREATE POLICY api_caller ON cairn.tenants FOR SELECT TO cairn_api
    USING ((SELECT cairn.api_scope()) IN (name, '*'));
