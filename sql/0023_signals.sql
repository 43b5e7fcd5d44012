-- SPDX-License-Identifier: MIT
-- 0023: signals, keyed events, and the waits that take them (sql/api/35_signals.sql;
-- docs/semantics.md "Waiting for the outside world").
--
-- A signal is addressed to one instance and kept from the moment it is sent, consumed or not:
-- the history of what the instance was told. A wait of a running instance (`wait approve`,
-- `wait event paid [key: k]`) that found nothing is a row of cairn.waits while it waits; the
-- send that answers it records the wait's result in runner_actions_done, as a child's outcome
-- is recorded for its parent's call, and wakes the instance.

-- The result a send records for a wait is JSON text (the payload, or [name, payload]), which
-- the runner decodes; the runner's own results stay msgpack.
ALTER TABLE cairn.runner_actions_done DROP CONSTRAINT runner_actions_done_status_check;
ALTER TABLE cairn.runner_actions_done ADD CONSTRAINT runner_actions_done_status_check
    CHECK (status IN ('ok', 'error', 'json'));

-- The signal names a version's waits take (cairnctl register fills it): a signal of another
-- name is refused, since nothing could ever consume it.
ALTER TABLE cairn.workflow_versions ADD COLUMN signals text[] NOT NULL DEFAULT '{}';

CREATE TABLE cairn.signals (
    id bigserial PRIMARY KEY, -- sends to one instance lock its queue row: ids in commit order
    instance_id uuid NOT NULL REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    name text NOT NULL,
    payload jsonb NOT NULL,
    dedup_key text,
    sent_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_by text NOT NULL,
    -- the wait that took it (its execution and attempt), in the write that recorded its result
    consumed_exec uuid,
    consumed_attempt integer,
    consumed_at timestamptz
);
CREATE INDEX signals_instance ON cairn.signals (instance_id, id);
CREATE INDEX signals_pending ON cairn.signals (instance_id, name, id) WHERE consumed_at IS NULL;
CREATE UNIQUE INDEX signals_dedup ON cairn.signals (instance_id, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- A wait nothing has answered yet. Goes with the queue row: an instance that ends waits no more.
CREATE TABLE cairn.waits (
    instance_id uuid NOT NULL REFERENCES cairn.queued_instances (instance_id) ON DELETE CASCADE,
    execution_id uuid NOT NULL,
    attempt integer NOT NULL,
    tenant_id text NOT NULL,
    event boolean NOT NULL,
    names text[] NOT NULL, -- the signal names, or the one event name
    key text,              -- an event's key
    since timestamptz NOT NULL DEFAULT clock_timestamp(),
    timeout_at timestamptz,
    PRIMARY KEY (instance_id, execution_id, attempt)
);
CREATE INDEX waits_event ON cairn.waits (tenant_id, (names[1]), key) WHERE event;

-- Keyed events, per tenant. An instance takes each event of a name and key once, its waits in
-- order; events published before it was created are not its.
CREATE TABLE cairn.events (
    id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    name text NOT NULL,
    key text NOT NULL,
    payload jsonb NOT NULL,
    dedup_key text,
    published_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    published_by text NOT NULL
);
CREATE INDEX events_key ON cairn.events (tenant_id, name, key, id);
CREATE UNIQUE INDEX events_dedup ON cairn.events (tenant_id, name, key, dedup_key)
    WHERE dedup_key IS NOT NULL;

-- Which instance's wait took which event.
CREATE TABLE cairn.event_reads (
    instance_id uuid NOT NULL REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    event_id bigint NOT NULL REFERENCES cairn.events (id) ON DELETE CASCADE,
    execution_id uuid NOT NULL,
    attempt integer NOT NULL,
    read_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (instance_id, event_id)
);
CREATE INDEX event_reads_event ON cairn.event_reads (event_id);

-- register_version takes the signal names (sql/api/20_instances.sql).
DROP FUNCTION IF EXISTS cairn.register_version(text, text, bytea, text, bigint, text[]);
