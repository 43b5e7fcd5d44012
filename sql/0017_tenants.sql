-- SPDX-License-Identifier: MIT
-- 0017: tenants (docs/operations.md "Tenants").
--
-- Every workflow version, instance, schedule, backfill, limit and retention belongs to a
-- tenant; `default` unless said otherwise, so single-tenant use does not change. Names are
-- unique per tenant: two tenants may each have a workflow `billing`.
--
-- A tenant T is a PostgreSQL role, cairn_tenant_T (NOLOGIN, member of the group cairn_tenant).
-- An application login granted that role acts as the tenant with `SET ROLE cairn_tenant_T`
-- (cairnctl --tenant, CAIRN_TENANT, the Python client's tenant=). SET ROLE needs membership,
-- so hand-written SQL cannot act as another tenant; a session setting such as
-- `SET cairn.tenant = 'T'` could be set by anyone to anything, so it could not isolate.
-- Row-level security does the isolation, in the database, for every statement:
--   * members of cairn_tenant see and write only the rows of the tenant they act as; one that
--     has not SET ROLE to a tenant acts as none and sees nothing;
--   * members of cairn_app (0016) act as the tenant `default`, as before;
--   * cairn_runner sees every tenant (runners run every tenant's instances);
--   * the owner, who runs migrations, bypasses row security (it is not FORCEd): as before, it
--     sees every tenant, and what it creates by name lands in `default`.
-- The SQL API's functions run with the caller's rights, so the policies hold inside them too;
-- those the runners call (children, schedules, backfills, limits, retention) look names up in
-- the tenant of the row they work for.
--
-- queued_instances, runner_actions_done and instance_history are visible to an application
-- when their instance is. The queue also carries its instance's tenant (set by the trigger
-- that marks limits, which reads the instance anyway) for the runners' fair claim across
-- tenants (runner/store/pg/claim.c).

CREATE TABLE cairn.tenants (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,47}$'),
    max_running integer CHECK (max_running > 0),   -- a quota on running instances; NULL: none
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO cairn.tenants (name) VALUES ('default');

-- Roles belong to the cluster, not to one database: tolerate another database's migration
-- having made them.
DO $$
BEGIN
    BEGIN
        CREATE ROLE cairn_tenant NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
    END;
    BEGIN
        CREATE ROLE cairn_tenant_default NOLOGIN IN ROLE cairn_tenant;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        GRANT cairn_tenant TO cairn_tenant_default;
    END;
END
$$;

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.acting_tenant, cairn.current_tenant, cairn.tenant_create, cairn.parent_tenant, trigger
-- runner_instances_parent_tenant, cairn.tenant_quota (sql/api/10_tenants.sql); cairn.enqueue,
-- cairn.cancel (sql/api/20_instances.sql); cairn.start_children (sql/api/30_children.sql);
-- cairn.schedule_add, cairn.schedule_fire, cairn.schedule_pause, cairn.schedule_resume,
-- cairn.schedule_delete (sql/api/40_schedules.sql); cairn.backfill_create, cairn.backfill_tick
-- (sql/api/70_backfills.sql); cairn.limit_lock_key, cairn.queue_limit, cairn.limit_mark,
-- cairn.limit_set, cairn.claim_limited, cairn.limit_status, cairn.limit_delete
-- (sql/api/50_limits.sql); cairn.prune_batch, cairn.prune_due, cairn.retention_set
-- (sql/api/60_retention.sql).

-- Existing rows are the default tenant's (a constant default: no table rewrite); new ones
-- take the tenant of the statement (the default cairn.current_tenant(), set with the function
-- in sql/api/10_tenants.sql). The queue's is set by its trigger.
ALTER TABLE cairn.workflow_versions
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.runner_instances ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE cairn.schedules
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.backfills
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.workflow_limits
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.workflow_retention
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.queued_instances ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';

-- Names are unique per tenant. No index of a table that row security filters starts with the
-- tenant: the policies add `tenant_id = <the tenant>` to an application's every statement, and
-- while a new tenant's rows are not analyzed yet the planner takes that condition for a
-- selective one and walks an index on the tenant rather than the primary key. A first version,
-- with the idempotency key's index led by the tenant, made each enqueue of a fresh tenant scan
-- all of the tenant's instances: 4 000 enqueues took 2.2 s where 2 000 had taken 0.38 s.
ALTER TABLE cairn.workflow_versions
    DROP CONSTRAINT workflow_versions_workflow_name_workflow_version_key,
    ADD CONSTRAINT workflow_versions_name UNIQUE (workflow_name, workflow_version, tenant_id);
ALTER TABLE cairn.runner_instances
    DROP CONSTRAINT runner_instances_idempotency,
    ADD CONSTRAINT runner_instances_idempotency
        UNIQUE (workflow_name, idempotency_key, tenant_id);
ALTER TABLE cairn.schedules DROP CONSTRAINT schedules_pkey, ADD PRIMARY KEY (name, tenant_id);
ALTER TABLE cairn.workflow_limits DROP CONSTRAINT workflow_limits_pkey,
    ADD PRIMARY KEY (workflow_name, tenant_id);
ALTER TABLE cairn.workflow_retention DROP CONSTRAINT workflow_retention_pkey,
    ADD PRIMARY KEY (workflow_name, tenant_id);
DROP INDEX cairn.runner_instances_schedule_slot;
CREATE UNIQUE INDEX runner_instances_schedule_slot ON cairn.runner_instances
    (schedule_name, schedule_slot, tenant_id) WHERE schedule_name IS NOT NULL;
DROP INDEX cairn.workflow_versions_latest;
CREATE INDEX workflow_versions_latest ON cairn.workflow_versions
    (workflow_name, tenant_id, created_at DESC);

-- References between rows stay within a tenant, whoever writes them: an application could
-- otherwise point a row of its own at another tenant's workflow version (and have the runners
-- run it for it), backfill (and make up its partitions) or parent instance (and hand it a
-- made-up child outcome). Foreign keys are checked with the owner's rights, past row security,
-- so the version's and the backfill's carry the tenant (NOT VALID: rows from before hold one
-- tenant; new and changed rows are checked). The parent's is a trigger, run only for rows with
-- a parent: a foreign key to (instance_id, tenant_id) needs a unique index of its own on the
-- hottest table, which cost queue-noop 13% and 8% more WAL per instance (measured, 3 runs each,
-- interleaved), and pruning a parent before its children would have had to change them.
ALTER TABLE cairn.workflow_versions ADD CONSTRAINT workflow_versions_id_tenant
    UNIQUE (id, tenant_id);
ALTER TABLE cairn.backfills ADD CONSTRAINT backfills_id_tenant UNIQUE (id, tenant_id);
ALTER TABLE cairn.runner_instances
    DROP CONSTRAINT runner_instances_workflow_version_id_fkey,
    ADD CONSTRAINT runner_instances_version_tenant FOREIGN KEY (workflow_version_id, tenant_id)
        REFERENCES cairn.workflow_versions (id, tenant_id) NOT VALID,
    ADD CONSTRAINT runner_instances_backfill_tenant FOREIGN KEY (backfill_id, tenant_id)
        REFERENCES cairn.backfills (id, tenant_id) NOT VALID;

-- The claim's index leads with the tenant: the runners' claim walks it per tenant when there
-- are several (runner/store/pg/claim.c), and for the tenant `default` alone otherwise, in the same
-- order as before. Replaced rather than added to: one index more on the hottest table would
-- cost every enqueue and every claim.
DROP INDEX cairn.queued_instances_ready;
CREATE INDEX queued_instances_ready ON cairn.queued_instances
    (tenant_id, priority DESC, scheduled_at)
    WHERE lock_uuid IS NULL AND (limit_name IS NULL OR holds_slot);
DROP INDEX cairn.queued_instances_waiting;
CREATE INDEX queued_instances_waiting ON cairn.queued_instances
    (tenant_id, limit_name, limit_key, priority DESC, scheduled_at)
    WHERE limit_name IS NOT NULL AND NOT holds_slot;
-- Also what a tenant's quota counts (tenant_id alone).
DROP INDEX cairn.queued_instances_slots;
CREATE INDEX queued_instances_slots ON cairn.queued_instances (tenant_id, limit_name, limit_key)
    WHERE holds_slot;

-- The functions of earlier migrations that look names up got the tenant added to each lookup
-- and each new row (sql/api/ holds them as they are now).

-- 0011's schedule functions take the tenant: the caller's, or (cairn.schedule_fire, from the
-- runners) the schedule's. The old three-argument schedule_fire is dropped: beside the new
-- four-argument one, three-argument calls would be ambiguous.
DROP FUNCTION IF EXISTS cairn.schedule_fire(text, timestamptz, timestamptz);

-- Limits are per (tenant, workflow), and a tenant's quota limits every workflow of the tenant:
-- its queue rows are limited (limit_name set) and cairn.claim_limited admits them only while
-- the tenant holds fewer slots than its quota. The advisory lock of 0012 is per tenant and
-- workflow.
DROP FUNCTION IF EXISTS cairn.limit_lock_key(text);

-- 0012's view is per tenant now, and both views are security_invoker, so that an application
-- role sees only its own tenant's rows through them (a view otherwise reads with its owner's
-- rights). Dropped here because its columns changed.
DROP VIEW IF EXISTS cairn.limit_status;

-- Retention is per (tenant, workflow). cairn.prune_batch gains p_tenant (NULL: any tenant) and
-- p_exclude_own: leave out the instances whose tenant and workflow have their own retention
-- (what the runners' default retention must not touch; a list of names, p_exclude, would leave
-- out the workflows of that name in every tenant).
DROP FUNCTION IF EXISTS cairn.prune_batch(timestamptz, text, text[], integer, timestamptz);

-- Row security. Policies per role group; a role in none of them sees no row of these tables.
ALTER TABLE cairn.tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.runner_instances ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.backfills ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.queued_instances ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.runner_actions_done ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.instance_history ENABLE ROW LEVEL SECURITY;

-- The policies, which name the functions that say who acts as which tenant, are in
-- sql/api/80_row_security.sql.

-- cairn_tenant has cairn_app's rights (0016): rows, not shapes.
GRANT USAGE ON SCHEMA cairn TO cairn_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO cairn_tenant;
-- Sequences: USAGE (nextval) only, not SELECT: a sequence's last value counts every tenant's
-- rows.
GRANT USAGE ON ALL SEQUENCES IN SCHEMA cairn TO cairn_tenant;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cairn TO cairn_tenant;
REVOKE INSERT, UPDATE, DELETE ON cairn.schema_migrations FROM cairn_tenant;
REVOKE INSERT, UPDATE, DELETE ON cairn.runners FROM cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn GRANT USAGE ON SEQUENCES TO cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn GRANT EXECUTE ON FUNCTIONS TO cairn_tenant;
-- What the claims go by is the runners' to write: an application's rights on the queue and
-- the limits rows are narrowed to the columns its functions write (a new queue row: enqueue,
-- retry, a schedule's trigger; re-marking after a limit change: cairn.limit_set), so that it
-- cannot fake an expired lease (which the claim takes first, across tenants) or move its
-- limits rows to the front of the claim's rotation. Row-level security already keeps each to
-- its own rows; this keeps the scheduling of everyone's rows honest.
REVOKE INSERT, UPDATE ON cairn.queued_instances FROM cairn_app, cairn_tenant;
GRANT INSERT (instance_id, workflow_version_id, priority, scheduled_at),
      UPDATE (limit_name, limit_key, holds_slot)
    ON cairn.queued_instances TO cairn_app, cairn_tenant;
REVOKE UPDATE ON cairn.workflow_limits FROM cairn_app, cairn_tenant;
GRANT UPDATE (max_running, max_per_key, updated_at) ON cairn.workflow_limits
    TO cairn_app, cairn_tenant;
-- Tenants and quotas are the owner's; a runner locks a tenant's row (UPDATE's right) while it
-- counts the tenant's slots.
REVOKE INSERT, UPDATE, DELETE ON cairn.tenants FROM cairn_app, cairn_tenant;
REVOKE INSERT, DELETE ON cairn.tenants FROM cairn_runner;
