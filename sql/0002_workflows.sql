-- SPDX-License-Identifier: MIT
-- 0002: workflow versions, instances, the claim queue, recorded action results, and the SQL API
-- (cairn.enqueue). docs/operations.md describes the tables for operators.

-- One row per registered (name, version). The version defaults to a prefix of ir_hash (the hash
-- of the compiled graph), so registering unchanged source again is a no-op and changed source
-- gets a new version. The same name and version with other source is refused by cairnctl.
CREATE TABLE cairn.workflow_versions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_name text NOT NULL CHECK (workflow_name ~ '^[A-Za-z_][A-Za-z0-9_.-]{0,127}$'),
    workflow_version text NOT NULL CHECK (workflow_version ~ '^[A-Za-z0-9_.-]{1,64}$'),
    ir_hash text NOT NULL,
    source text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (workflow_name, workflow_version)
);
CREATE INDEX workflow_versions_latest ON cairn.workflow_versions (workflow_name, created_at DESC);

-- Every instance, for its whole life: stays queryable after completion.
CREATE TABLE cairn.runner_instances (
    instance_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_version_id uuid NOT NULL REFERENCES cairn.workflow_versions (id),
    workflow_name text NOT NULL,
    status text NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
    input jsonb NOT NULL CHECK (jsonb_typeof(input) = 'object'),
    state bytea,           -- the executor's snapshot (msgpack), written by the runner
    result jsonb,          -- the workflow's return value, when completed
    error jsonb,           -- {type, message, ...}, when failed
    idempotency_key text UNIQUE,
    priority integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at timestamptz,
    completed_at timestamptz
);
CREATE INDEX runner_instances_status ON cairn.runner_instances (status, created_at DESC);
CREATE INDEX runner_instances_workflow ON cairn.runner_instances (workflow_name, created_at DESC);

-- The small, hot claim queue: a row exists while the instance is not finished.
CREATE TABLE cairn.queued_instances (
    instance_id uuid PRIMARY KEY REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    workflow_version_id uuid NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    scheduled_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    lock_uuid uuid,                 -- a fresh token per claim (fences every write)
    lock_expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX queued_instances_claim ON cairn.queued_instances (priority DESC, scheduled_at);
CREATE INDEX queued_instances_leases ON cairn.queued_instances (lock_expires_at)
    WHERE lock_uuid IS NOT NULL;

-- Append-only record of finished action attempts: replayed on hydration.
CREATE TABLE cairn.runner_actions_done (
    id bigserial PRIMARY KEY,
    instance_id uuid NOT NULL,
    execution_id uuid NOT NULL,
    attempt integer NOT NULL CHECK (attempt >= 1),
    status text NOT NULL CHECK (status IN ('ok', 'error')),
    result bytea NOT NULL,          -- msgpack value document (the result or the error map)
    started_at timestamptz,
    completed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    worker text
);
CREATE INDEX runner_actions_done_instance ON cairn.runner_actions_done (instance_id);
CREATE INDEX runner_actions_done_execution ON cairn.runner_actions_done (execution_id, attempt);

-- Added or changed here, now defined in sql/api/, whose files always hold the current definitions:
-- cairn.enqueue (sql/api/20_instances.sql).
