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

-- Enqueues an instance of the latest (or the given) version of a workflow and returns its id.
-- With an idempotency key that was used before, returns that instance and enqueues nothing.
-- Wakes runners with NOTIFY cairn_enqueue (a hint; they also poll).
CREATE FUNCTION cairn.enqueue(
    workflow_name text,
    input jsonb DEFAULT '{}',
    idempotency_key text DEFAULT NULL,
    priority integer DEFAULT 0,
    scheduled_at timestamptz DEFAULT NULL,
    workflow_version text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_version_id uuid;
    v_id uuid;
BEGIN
    IF input IS NULL OR jsonb_typeof(input) <> 'object' THEN
        RAISE EXCEPTION 'cairn.enqueue: input must be a JSON object, got %',
            coalesce(jsonb_typeof(input), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT v.id INTO v_version_id
      FROM cairn.workflow_versions v
     WHERE v.workflow_name = enqueue.workflow_name
       AND (enqueue.workflow_version IS NULL OR v.workflow_version = enqueue.workflow_version)
     ORDER BY v.created_at DESC
     LIMIT 1;
    IF v_version_id IS NULL THEN
        IF enqueue.workflow_version IS NULL THEN
            RAISE EXCEPTION 'cairn.enqueue: unknown workflow "%" (register it first)',
                enqueue.workflow_name USING ERRCODE = 'undefined_object';
        END IF;
        RAISE EXCEPTION 'cairn.enqueue: workflow "%" has no version "%"',
            enqueue.workflow_name, enqueue.workflow_version USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO cairn.runner_instances AS ri
           (workflow_version_id, workflow_name, input, idempotency_key, priority)
    VALUES (v_version_id, enqueue.workflow_name, enqueue.input, enqueue.idempotency_key,
            coalesce(enqueue.priority, 0))
    ON CONFLICT ON CONSTRAINT runner_instances_idempotency_key_key DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        SELECT ri.instance_id INTO v_id
          FROM cairn.runner_instances ri
         WHERE ri.idempotency_key = enqueue.idempotency_key;
        RETURN v_id;
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, coalesce(enqueue.priority, 0),
            coalesce(enqueue.scheduled_at, clock_timestamp()));
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END;
$$;
