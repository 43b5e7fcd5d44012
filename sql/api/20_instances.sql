-- SPDX-License-Identifier: MIT
-- 20_instances.sql
--
-- Instances (docs/operations.md "Instance states", "Cancelling instances", "Workflow timeouts",
-- "Retrying an instance", "Limits"): registering a version, enqueueing with its checks, the
-- status transitions the database allows, cancel, retry, and the sweep of overdue instances.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- The limits as one row. cairnctl checks the same figures (runner/ctl/ctl.h) before it calls
-- cairn.enqueue; a test holds the two to the same values.
-- PL/pgSQL, not SQL: a SQL function returning a row is not inlined, and was parsed and planned
-- again at every call (5% of an enqueue).
CREATE OR REPLACE FUNCTION cairn.limits(
    OUT input_bytes integer,
    OUT value_depth integer,
    OUT idempotency_key_bytes integer
)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    -- input_bytes: the input travels in every claim (up to 256 instances at once) and its values
    -- stay in the snapshot rewritten after every step, so it must stay small; larger data goes
    -- by reference. value_depth: IR_VALUE_MAX_DEPTH, the deepest value the runner can load and
    -- snapshot. idempotency_key_bytes: far below the B-tree row limit (about 2.7 kB) of the
    -- unique index on the key, and long enough for any identifier or a hex SHA-256.
    input_bytes := 262144;
    value_depth := 32;
    idempotency_key_bytes := 255;
END
$$;

-- The longest timeout: a year and a day (the language's bound for every policy duration).
CREATE OR REPLACE FUNCTION cairn.max_timeout_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 31622400000::bigint $$;

-- The channel an instance's end is announced on (docs/operations.md "Waiting for an instance"):
-- one per instance, so that a client hears only the instance it waits for, and a tenant learns
-- no other tenant's ids by listening.
CREATE OR REPLACE FUNCTION cairn.done_channel(p_instance_id uuid) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'cairn_done_' || replace(p_instance_id::text, '-', '')
$$;

-- Every status change passes here, so this is the one place that says which are allowed, and
-- the one that announces an end: whatever finishes an instance (its runner's write, cancel, the
-- deadline sweep), clients waiting on cairn.done_channel hear it when that write commits.
--
--   queued  -> running                      a runner claimed it
--   running -> queued                       handed back (shutdown, a long sleep), lease reclaimed
--   running -> completed | failed | cancelled | timed_out
--                                           it ran and ended
--   queued  -> cancelled | timed_out        it ended unclaimed: cairn.cancel of an instance
--                                           nobody holds, cairn.expire_overdue past its deadline
--   failed | cancelled | timed_out -> queued
--                                           run again (redrive)
--
-- Only a run completes or fails an instance, so queued -> completed | failed is refused: a
-- runner writes an end only under the lease its claim took, and the claim marks it running in
-- the same statement.
CREATE OR REPLACE FUNCTION cairn.check_status_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.status = 'queued' AND NEW.status = 'running')
       OR (OLD.status = 'running' AND NEW.status = 'queued')
       OR (OLD.status IN ('failed', 'cancelled', 'timed_out') AND NEW.status = 'queued') THEN
        RETURN NEW;
    END IF;
    IF (OLD.status = 'running'
        AND NEW.status IN ('completed', 'failed', 'cancelled', 'timed_out'))
       OR (OLD.status = 'queued' AND NEW.status IN ('cancelled', 'timed_out')) THEN
        PERFORM pg_notify(cairn.done_channel(NEW.instance_id), NEW.status);
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'instance %: status % -> % is not allowed', OLD.instance_id, OLD.status,
        NEW.status
        USING ERRCODE = 'check_violation',
              HINT = 'allowed: queued -> running -> queued; running -> completed, failed, '
                     'cancelled or timed_out; queued -> cancelled or timed_out; failed, '
                     'cancelled or timed_out -> queued';
END
$$;

-- Only when the status changes: the runner's other updates (snapshots, leases) skip it.
CREATE OR REPLACE TRIGGER runner_instances_status_transition
    BEFORE UPDATE OF status ON cairn.runner_instances
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION cairn.check_status_transition();

-- What `cairnctl register` wrote itself: a version of a workflow of the caller's tenant (the
-- same statement; an existing version is left alone and nothing is returned). p_signals: the
-- signal names its waits take (cairn.signal refuses others); p_input_schema: the JSON Schema of
-- its typed inputs (cairn.enqueue checks inputs against it), NULL when none is typed;
-- p_cleanup: whether it has finally blocks (a cancel then leaves an unheld instance to a claim,
-- which runs them).
CREATE OR REPLACE FUNCTION cairn.register_version(p_name text, p_version text, p_graph bytea,
                                       p_source text, p_timeout_ms bigint, p_inputs text[],
                                       p_signals text[] DEFAULT '{}',
                                       p_input_schema jsonb DEFAULT NULL,
                                       p_cleanup boolean DEFAULT false)
RETURNS TABLE (id uuid, workflow_version text, ir_hash text)
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    WITH h AS (SELECT encode(sha256(p_graph), 'hex') AS ir_hash)
    INSERT INTO cairn.workflow_versions AS v (workflow_name, workflow_version, ir_hash, source,
                                              timeout_ms, inputs, signals, input_schema,
                                              cleanup)
    SELECT p_name, coalesce(p_version, left(h.ir_hash, 12)), h.ir_hash, p_source,
           nullif(p_timeout_ms, 0), p_inputs, coalesce(p_signals, '{}'), p_input_schema,
           coalesce(p_cleanup, false)
      FROM h
    ON CONFLICT ON CONSTRAINT workflow_versions_name DO NOTHING
    RETURNING v.id, v.workflow_version, v.ir_hash
$$;

-- The latest (or the given) version of a workflow of the caller's tenant, for the API functions
-- that take a workflow by name; none is undefined_object (42704) in p_caller's name: 'unknown
-- workflow "W" (register it first)', or 'workflow "W" has no version "V"'. Not a definer: it
-- runs with the rights of the API function that calls it. cairn.enqueue and enqueue_many, on the
-- hot path, read three columns only (cairn.enqueue_target).
CREATE OR REPLACE FUNCTION cairn.find_version(p_caller text, p_workflow text,
                                              p_version text DEFAULT NULL)
RETURNS cairn.workflow_versions
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v cairn.workflow_versions%ROWTYPE;
BEGIN
    SELECT * INTO v FROM cairn.workflow_versions w
     WHERE w.tenant_id = cairn.current_tenant() AND w.workflow_name = p_workflow
       AND (p_version IS NULL OR w.workflow_version = p_version)
     ORDER BY w.created_at DESC LIMIT 1;
    IF NOT FOUND THEN
        IF p_version IS NULL THEN
            RAISE EXCEPTION '%: unknown workflow "%" (register it first)', p_caller, p_workflow
                USING ERRCODE = 'undefined_object';
        END IF;
        RAISE EXCEPTION '%: workflow "%" has no version "%"', p_caller, p_workflow, p_version
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN v;
END
$$;

-- Refuses, with a SQLSTATE and a hint, a JSON value the runner could not load (p_what of
-- p_caller: 'input' of 'cairn.enqueue'): over input_bytes of JSON text (54000), nested deeper
-- than value_depth (54000), or holding a number beyond int64 (once jsonb has stored it without a
-- fraction) or float64 (22003). The bounds are cairn.limits()'s, read once by the caller. Returns
-- true (a value, for callers on the enqueue path that assign it: see cairn.enqueue_check).
CREATE OR REPLACE FUNCTION cairn.check_value(p_caller text, p_what text, p_value jsonb,
                                             p_max_bytes integer, p_max_depth integer)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_text text := p_value::text;
    v_len integer;
    v_num numeric;
BEGIN
    -- Measured as PostgreSQL prints it (what the runner reads back), before the walks below,
    -- so that they only ever see a bounded document.
    v_len := octet_length(v_text);
    IF v_len > p_max_bytes THEN
        RAISE EXCEPTION '%: % is % bytes of JSON, over the limit of % bytes', p_caller, p_what,
            v_len, p_max_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Pass large data by reference (a URL, a row id) and let an action '
                         'fetch it. SELECT * FROM cairn.limits() lists the limits.';
    END IF;
    -- The walks below cost a jsonpath parse and a query each, on every enqueue; the text tells
    -- cheaply when neither can find anything: nesting p_max_depth deep takes that many brackets,
    -- and a number of at least 2^63 in magnitude, printed as jsonb prints it (no exponent), 19
    -- digits in a row (a bracket or digits in a string only make the walk run for nothing).
    -- The top object is at level 1 and jsonpath counts it as level 0, so anything at jsonpath
    -- level value_depth is one level too deep. The walk stops at that level.
    IF length(v_text) - length(translate(v_text, '[{', '')) >= p_max_depth
       AND jsonb_path_exists(p_value, format('strict $.**{%s}', p_max_depth)::jsonpath) THEN
        RAISE EXCEPTION '%: % is nested deeper than % levels', p_caller, p_what,
            p_max_depth
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'The top object is level 1; each array or object adds one.';
    END IF;
    IF v_text !~ '[0-9]{19}' THEN
        RETURN true;
    END IF;
    -- jsonb keeps numbers exactly, the runner does not: one printed without a fraction (jsonb
    -- prints 1e19 as 10000000000000000000) must fit int64, any other a finite float64, i.e.
    -- stay below 2^1024 - 2^970, from which strtod rounds to infinity. Only numbers of at least
    -- 2^63 in magnitude can fail either test, and jsonpath finds those without leaving C (in
    -- strict mode .abs() of anything but a number is an error, which a filter counts as false;
    -- measured, twice as fast as testing .type() first).
    SELECT q.n::numeric INTO v_num
      FROM jsonb_path_query(p_value, 'strict $.** ? (@.abs() >= 9223372036854775808)')
           AS q(n)
     WHERE (scale(q.n::numeric) = 0 AND q.n::numeric <> -9223372036854775808)
        OR abs(q.n::numeric) >= 2::numeric ^ 1024 - 2::numeric ^ 970
     LIMIT 1;
    IF v_num IS NOT NULL AND scale(v_num) = 0 THEN
        RAISE EXCEPTION '%: % holds the integer %, outside the 64-bit range', p_caller, p_what,
            CASE WHEN length(v_num::text) > 24 THEN left(v_num::text, 20) || '... ('
                 || length(v_num::text) || ' digits)' ELSE v_num::text END
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Integers must lie in -9223372036854775808..9223372036854775807. '
                         'jsonb stores a number without a fraction, such as 1e19, as an '
                         'integer: write a float with a fraction (10000000000000000000.0).';
    ELSIF v_num IS NOT NULL THEN
        RAISE EXCEPTION '%: % holds the number %, beyond the largest float', p_caller, p_what,
            left(v_num::text, 20) || '... (' || length(v_num::text) || ' characters)'
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Floats are 64-bit: their magnitude must stay below about 1.8e308.';
    END IF;
    RETURN true;
END
$$;

-- ---- typed inputs (docs/language.md "Typed inputs") -----------------------------------------
-- The schemas are those the compiler writes (ir/types.c): "type" (null, string, integer, number,
-- boolean, array with "items", object with "additionalProperties"), "anyOf", or {} for any.
-- Messages name types as the language does (int, str | None, list[int]), and their paths as
-- the workflow reads them (input.order.items[2]). An integer is a number written without a
-- fraction or an exponent, as the runner reads it.

-- The type schema s stands for, as the language writes it.
CREATE OR REPLACE FUNCTION cairn.schema_text(s jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN s ? 'anyOf' THEN (SELECT string_agg(cairn.schema_text(a), ' | ' ORDER BY n)
                                 FROM jsonb_array_elements(s->'anyOf') WITH ORDINALITY AS t(a, n))
        WHEN s->>'type' = 'array' AND s ? 'items' THEN 'list[' || cairn.schema_text(s->'items') || ']'
        WHEN s->>'type' = 'object' AND jsonb_typeof(s->'additionalProperties') = 'object'
            THEN 'dict[str, ' || cairn.schema_text(s->'additionalProperties') || ']'
        ELSE CASE s->>'type' WHEN 'null' THEN 'None' WHEN 'string' THEN 'str'
                 WHEN 'integer' THEN 'int' WHEN 'number' THEN 'float' WHEN 'boolean' THEN 'bool'
                 WHEN 'array' THEN 'list' WHEN 'object' THEN 'dict' ELSE 'any' END
    END
$$;

-- The type of value v, as the language names it.
CREATE OR REPLACE FUNCTION cairn.value_type_text(v jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE jsonb_typeof(v)
        WHEN 'object' THEN 'dict' WHEN 'array' THEN 'list' WHEN 'string' THEN 'str'
        WHEN 'boolean' THEN 'bool' WHEN 'null' THEN 'None'
        ELSE CASE WHEN v::text ~ '^-?[0-9]+$' THEN 'int' ELSE 'float' END
    END
$$;

-- Whether v is of the kind s names, its items aside.
CREATE OR REPLACE FUNCTION cairn.schema_kind_ok(s jsonb, v jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE s->>'type'
        WHEN 'null' THEN jsonb_typeof(v) = 'null'
        WHEN 'string' THEN jsonb_typeof(v) = 'string'
        WHEN 'integer' THEN jsonb_typeof(v) = 'number' AND v::text ~ '^-?[0-9]+$'
        WHEN 'number' THEN jsonb_typeof(v) = 'number'
        WHEN 'boolean' THEN jsonb_typeof(v) = 'boolean'
        WHEN 'array' THEN jsonb_typeof(v) = 'array'
        WHEN 'object' THEN jsonb_typeof(v) = 'object'
        ELSE NOT s ? 'anyOf'
    END
$$;

-- Why value v at p_path is not of type schema s ("input.tags[1]: expected str, got int"), or
-- NULL when it is. Of a union, the first alternative of v's kind explains the refusal, so that
-- `list[int] | None` says what inside the list was wrong.
CREATE OR REPLACE FUNCTION cairn.schema_mismatch(s jsonb, v jsonb, p_path text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    a jsonb;
    near jsonb;
    e jsonb;
    k text;
    i bigint;
    msg text;
BEGIN
    IF s ? 'anyOf' THEN
        FOR a IN SELECT x FROM jsonb_array_elements(s->'anyOf') AS t(x) LOOP
            IF cairn.schema_mismatch(a, v, p_path) IS NULL THEN
                RETURN NULL;
            END IF;
            IF near IS NULL AND cairn.schema_kind_ok(a, v) THEN
                near := a;
            END IF;
        END LOOP;
        IF near IS NOT NULL THEN
            RETURN cairn.schema_mismatch(near, v, p_path);
        END IF;
        RETURN format('%s: expected %s, got %s', p_path, cairn.schema_text(s),
                      cairn.value_type_text(v));
    END IF;
    IF NOT cairn.schema_kind_ok(s, v) THEN
        RETURN format('%s: expected %s, got %s', p_path, cairn.schema_text(s),
                      cairn.value_type_text(v));
    END IF;
    IF s->>'type' = 'array' AND s ? 'items' THEN
        FOR e, i IN SELECT x, n - 1 FROM jsonb_array_elements(v) WITH ORDINALITY AS t(x, n) LOOP
            msg := cairn.schema_mismatch(s->'items', e, format('%s[%s]', p_path, i));
            IF msg IS NOT NULL THEN
                RETURN msg;
            END IF;
        END LOOP;
    ELSIF s->>'type' = 'object' AND jsonb_typeof(s->'additionalProperties') = 'object' THEN
        FOR k, e IN SELECT * FROM jsonb_each(v) LOOP
            msg := cairn.schema_mismatch(s->'additionalProperties', e, p_path || '.' || k);
            IF msg IS NOT NULL THEN
                RETURN msg;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

-- Why input p_input does not fit the inputs of workflow p_workflow (schema p_schema, as the
-- compiler wrote it): an input it does not take, a required one missing, or one of another
-- type; NULL when it fits.
CREATE OR REPLACE FUNCTION cairn.input_refusal(p_schema jsonb, p_input jsonb, p_workflow text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    k text;
    e jsonb;
    msg text;
BEGIN
    FOR k IN SELECT jsonb_object_keys(p_input) LOOP
        IF NOT (p_schema->'properties') ? k THEN
            RETURN format('input.%s: workflow "%s" has no such input (its inputs: %s)', k,
                          p_workflow, (SELECT string_agg(x, ', ')
                                         FROM jsonb_object_keys(p_schema->'properties') x));
        END IF;
    END LOOP;
    FOR k IN SELECT jsonb_array_elements_text(p_schema->'required') LOOP
        IF NOT p_input ? k THEN
            RETURN format('input.%s: missing (workflow "%s" requires it: %s)', k, p_workflow,
                          cairn.schema_text(p_schema->'properties'->k));
        END IF;
    END LOOP;
    FOR k, e IN SELECT * FROM jsonb_each(p_input) LOOP
        msg := cairn.schema_mismatch(p_schema->'properties'->k, e, 'input.' || k);
        IF msg IS NOT NULL THEN
            RETURN msg;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The version an enqueue of p_workflow targets, for tenant p_tenant: the newest, or p_version.
-- Three columns, not find_version's whole row (its graph and source), on the enqueue path; when
-- there is none, cairn.find_version raises why, in p_caller's name.
CREATE OR REPLACE FUNCTION cairn.enqueue_target(p_caller text, p_workflow text, p_version text,
                                                p_tenant text, OUT id uuid,
                                                OUT timeout_ms bigint, OUT input_schema jsonb)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT v.id, v.timeout_ms, v.input_schema INTO id, timeout_ms, input_schema
      FROM cairn.workflow_versions v
     WHERE v.tenant_id = p_tenant AND v.workflow_name = p_workflow
       AND (p_version IS NULL OR v.workflow_version = p_version)
     ORDER BY v.created_at DESC
     LIMIT 1;
    IF id IS NULL THEN
        PERFORM cairn.find_version(p_caller, p_workflow, p_version);
    END IF;
END
$$;

-- The checks of one instance to enqueue, each with its SQLSTATE, in p_where's name
-- ('cairn.enqueue', or 'cairn.enqueue_many: item 3 of 5'): the input a JSON object within the
-- value limits (cairn.check_value), the keys non-empty and short enough, and, when the version
-- has typed inputs (p_schema), the input of those types (22Z01). The bounds are cairn.limits()'s,
-- read once by the caller. Returns true: a value, so that a caller assigns it (a plain
-- expression) instead of PERFORM, which starts an executor for a query.
CREATE OR REPLACE FUNCTION cairn.enqueue_check(p_where text, p_workflow text, p_input jsonb,
                                               p_idempotency_key text, p_concurrency_key text,
                                               p_schema jsonb, p_input_bytes integer,
                                               p_value_depth integer, p_key_bytes integer)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_refusal text;
    v_ok boolean;
BEGIN
    IF p_input IS NULL OR jsonb_typeof(p_input) <> 'object' THEN
        RAISE EXCEPTION '%: input must be a JSON object, got %', p_where,
            coalesce(jsonb_typeof(p_input), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_ok := cairn.check_value(p_where, 'input', p_input, p_input_bytes, p_value_depth);
    IF p_idempotency_key = '' THEN
        RAISE EXCEPTION '%: the idempotency key is empty', p_where
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(p_idempotency_key) > p_key_bytes THEN
        RAISE EXCEPTION '%: the idempotency key is % bytes, over the limit of % bytes', p_where,
            octet_length(p_idempotency_key), p_key_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Use a digest of a longer key (a hex SHA-256 is 64 bytes).';
    END IF;
    IF p_concurrency_key = '' THEN
        RAISE EXCEPTION '%: the concurrency key is empty', p_where
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(p_concurrency_key) > p_key_bytes THEN
        RAISE EXCEPTION '%: the concurrency key is % bytes, over the limit of % bytes', p_where,
            octet_length(p_concurrency_key), p_key_bytes
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF p_schema IS NOT NULL THEN
        v_refusal := cairn.input_refusal(p_schema, p_input, p_workflow);
        IF v_refusal IS NOT NULL THEN
            RAISE EXCEPTION '%: %', p_where, v_refusal
                USING ERRCODE = '22Z01',
                      HINT = format('cairnctl schema %s prints the inputs it takes.', p_workflow);
        END IF;
    END IF;
    RETURN true;
END
$$;

-- The checks of what an enqueue call gives all its instances, in p_caller's name: a finite
-- scheduled_at, a timeout within (0, cairn.max_timeout_ms()]. Returns the timeout in ms, NULL
-- when none was given (the workflow's own [timeout: D] then, if any).
CREATE OR REPLACE FUNCTION cairn.enqueue_timeout_ms(p_caller text, p_scheduled_at timestamptz,
                                                    p_timeout interval)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_ms bigint;
BEGIN
    IF NOT isfinite(p_scheduled_at) THEN
        RAISE EXCEPTION '%: scheduled_at must be a finite time, got %', p_caller, p_scheduled_at
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL means now.';
    END IF;
    IF p_timeout IS NULL THEN
        RETURN NULL;
    END IF;
    v_ms := floor(extract(epoch FROM p_timeout) * 1000);
    IF v_ms <= 0 OR v_ms > cairn.max_timeout_ms() THEN
        RAISE EXCEPTION '%: timeout must be positive and at most 366 days, got %', p_caller,
            p_timeout
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL means the workflow''s own [timeout: D], if it has one.';
    END IF;
    RETURN v_ms;
END
$$;

-- What an enqueue with idempotency key p_key gets when the key was used before for p_workflow
-- (by an earlier call, or an earlier item of the same cairn.enqueue_many): that instance's id,
-- if it was enqueued with the same input (jsonb equality: key order and spacing do not count)
-- or p_first_if_differs; else 22023, as Stripe's API does: a client that reuses a key for a
-- different request has a bug that silently getting the first instance would hide.
CREATE OR REPLACE FUNCTION cairn.enqueue_existing(p_where text, p_workflow text, p_key text,
                                                  p_input jsonb, p_tenant text,
                                                  p_first_if_differs boolean)
RETURNS uuid
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_id uuid;
    v_first jsonb;
BEGIN
    SELECT ri.instance_id, ri.input INTO v_id, v_first
      FROM cairn.runner_instances ri
     WHERE ri.tenant_id = p_tenant AND ri.workflow_name = p_workflow
       AND ri.idempotency_key = p_key;
    IF v_first IS DISTINCT FROM p_input AND NOT coalesce(p_first_if_differs, false) THEN
        RAISE EXCEPTION '%: idempotency key "%" of workflow "%" was used with another input '
                        '(instance %)', p_where, p_key, p_workflow, v_id
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'The same input returns that instance; a new request needs a new key; '
                         'first_if_input_differs => true returns the first instance anyway.';
    END IF;
    RETURN v_id;
END
$$;

-- Wakes the runners' claimers with NOTIFY cairn_enqueue, if any waits for one now (each says
-- until when in claim_waits before it waits, then claims once more: 0033). A claimer that does
-- not wait is claiming, and finds the new instance without being told; a NOTIFY makes the
-- notifying transactions commit one at a time. A notification missed in the race between a
-- claimer's announcement and an enqueue that checked just before it costs that instance at
-- most one poll interval, as a lost notification always did.
CREATE OR REPLACE FUNCTION cairn.wake_claimers() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM cairn.claim_waits w WHERE w.until > clock_timestamp()) THEN
        PERFORM pg_notify('cairn_enqueue', '');
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- Enqueues an instance of the latest (or the given) version of a workflow of the caller's tenant
-- and returns its id. With an idempotency key that was used before for the workflow, returns
-- that instance and enqueues nothing, or refuses another input (cairn.enqueue_existing);
-- first_if_input_differs returns the first instance anyway (what signal-with-start wants: its
-- input only starts the instance). Other arguments (priority, scheduled_at, version, timeout)
-- are not compared. Every check (cairn.enqueue_check, cairn.enqueue_timeout_ms) runs before the
-- idempotency lookup: a request is refused for what it is, whichever key it carries. Wakes
-- waiting claimers (cairn.wake_claimers: a hint; they also poll). cairn.enqueue_many does the
-- same for many instances in one call.
CREATE OR REPLACE FUNCTION cairn.enqueue(
    workflow_name text,
    input jsonb DEFAULT '{}',
    idempotency_key text DEFAULT NULL,
    priority integer DEFAULT 0,
    scheduled_at timestamptz DEFAULT NULL,
    workflow_version text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    first_if_input_differs boolean DEFAULT false
) RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_version_id uuid;
    v_version_timeout bigint;
    v_schema jsonb;
    v_timeout_ms bigint;
    v_due timestamptz;
    v_id uuid;
    v_lim record := cairn.limits();
    v_t record;
    v_ok boolean;
    v_tenant text := cairn.current_tenant();
BEGIN
    v_timeout_ms := cairn.enqueue_timeout_ms('cairn.enqueue', enqueue.scheduled_at,
                                             enqueue.timeout);
    v_t := cairn.enqueue_target('cairn.enqueue', enqueue.workflow_name, enqueue.workflow_version,
                                v_tenant);
    v_version_id := v_t.id;
    v_version_timeout := v_t.timeout_ms;
    v_schema := v_t.input_schema;
    v_ok := cairn.enqueue_check('cairn.enqueue', enqueue.workflow_name, enqueue.input,
                                enqueue.idempotency_key, enqueue.concurrency_key, v_schema,
                                v_lim.input_bytes, v_lim.value_depth,
                                v_lim.idempotency_key_bytes);
    v_timeout_ms := coalesce(v_timeout_ms, v_version_timeout);
    v_due := coalesce(enqueue.scheduled_at, clock_timestamp());
    INSERT INTO cairn.runner_instances AS ri
           (tenant_id, workflow_version_id, workflow_name, input, idempotency_key, priority,
            timeout_ms, deadline_at, concurrency_key)
    VALUES (v_tenant, v_version_id, enqueue.workflow_name, enqueue.input, enqueue.idempotency_key,
            coalesce(enqueue.priority, 0), v_timeout_ms,
            v_due + v_timeout_ms * interval '1 millisecond', enqueue.concurrency_key)
    ON CONFLICT ((ri.workflow_name), (ri.idempotency_key), (ri.tenant_id))
        WHERE ri.idempotency_key IS NOT NULL DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        RETURN cairn.enqueue_existing('cairn.enqueue', enqueue.workflow_name,
                                      enqueue.idempotency_key, enqueue.input, v_tenant,
                                      first_if_input_differs);
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, coalesce(enqueue.priority, 0), v_due);
    v_ok := cairn.wake_claimers();
    RETURN v_id;
END;
$$;

-- Enqueues many instances of one workflow version in one call, all or nothing, and returns
-- their ids in the order of `inputs` (a JSON array of input objects). Each item is checked as
-- cairn.enqueue checks its instance, and a refusal names it ('cairn.enqueue_many: item 3 of
-- 5: ...', counted from 1) and stores nothing. idempotency_keys and concurrency_keys, when
-- given, have one entry per item (NULL: none for that item); an item whose key was used before,
-- by an earlier call or an earlier item, gets that instance's id, as cairn.enqueue does. The
-- other arguments apply to every item. One statement inserts the instances and one their queue
-- rows, and one cairn.wake_claimers wakes the runners.
CREATE OR REPLACE FUNCTION cairn.enqueue_many(
    workflow_name text,
    inputs jsonb,
    idempotency_keys text[] DEFAULT NULL,
    priority integer DEFAULT 0,
    scheduled_at timestamptz DEFAULT NULL,
    workflow_version text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    concurrency_keys text[] DEFAULT NULL,
    first_if_input_differs boolean DEFAULT false
) RETURNS uuid[]
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_version_id uuid;
    v_version_timeout bigint;
    v_schema jsonb;
    v_timeout_ms bigint;
    v_due timestamptz;
    v_n integer;
    v_ids uuid[];
    v_new uuid[];
    v_lim record := cairn.limits();
    v_t record;
    v_ok boolean;
    v_tenant text := cairn.current_tenant();
    i integer;
BEGIN
    IF inputs IS NULL OR jsonb_typeof(inputs) <> 'array' THEN
        RAISE EXCEPTION 'cairn.enqueue_many: inputs must be a JSON array of input objects, got %',
            coalesce(jsonb_typeof(inputs), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_n := jsonb_array_length(inputs);
    IF cardinality(idempotency_keys) <> v_n OR array_ndims(idempotency_keys) > 1 THEN
        RAISE EXCEPTION 'cairn.enqueue_many: % idempotency keys for % inputs',
            cardinality(idempotency_keys), v_n
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'One per input, NULL for an input without one; or NULL for none at all.';
    END IF;
    IF cardinality(concurrency_keys) <> v_n OR array_ndims(concurrency_keys) > 1 THEN
        RAISE EXCEPTION 'cairn.enqueue_many: % concurrency keys for % inputs',
            cardinality(concurrency_keys), v_n
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'One per input, NULL for an input without one; or NULL for none at all.';
    END IF;
    v_timeout_ms := cairn.enqueue_timeout_ms('cairn.enqueue_many', enqueue_many.scheduled_at,
                                             enqueue_many.timeout);
    v_t := cairn.enqueue_target('cairn.enqueue_many', enqueue_many.workflow_name,
                                enqueue_many.workflow_version, v_tenant);
    v_version_id := v_t.id;
    v_version_timeout := v_t.timeout_ms;
    v_schema := v_t.input_schema;
    FOR i IN 1 .. v_n LOOP
        v_ok := cairn.enqueue_check(format('cairn.enqueue_many: item %s of %s', i, v_n),
                                    enqueue_many.workflow_name, inputs -> (i - 1),
                                    idempotency_keys[i], concurrency_keys[i], v_schema,
                                    v_lim.input_bytes, v_lim.value_depth,
                                    v_lim.idempotency_key_bytes);
    END LOOP;
    IF v_n = 0 THEN
        RETURN '{}';
    END IF;
    v_timeout_ms := coalesce(v_timeout_ms, v_version_timeout);
    v_due := coalesce(enqueue_many.scheduled_at, clock_timestamp());
    -- The ids are drawn here, so that the result is in the items' order whatever order the
    -- insert returns its rows in; an item whose key is taken keeps no row and is looked up.
    v_ids := ARRAY(SELECT gen_random_uuid() FROM generate_series(1, v_n));
    WITH ins AS (
        INSERT INTO cairn.runner_instances AS ri
               (instance_id, tenant_id, workflow_version_id, workflow_name, input,
                idempotency_key, priority, timeout_ms, deadline_at, concurrency_key)
        SELECT v_ids[e.o], v_tenant, v_version_id, enqueue_many.workflow_name, e.v,
               idempotency_keys[e.o], coalesce(enqueue_many.priority, 0), v_timeout_ms,
               v_due + v_timeout_ms * interval '1 millisecond', concurrency_keys[e.o]
          FROM jsonb_array_elements(inputs) WITH ORDINALITY AS e(v, o)
         ORDER BY e.o
        ON CONFLICT ((ri.workflow_name), (ri.idempotency_key), (ri.tenant_id))
            WHERE ri.idempotency_key IS NOT NULL DO NOTHING
        RETURNING ri.instance_id)
    SELECT coalesce(array_agg(ins.instance_id), '{}') INTO v_new FROM ins;
    -- A statement of its own: the queue's limit trigger reads the instance rows.
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    SELECT n.id, v_version_id, coalesce(enqueue_many.priority, 0), v_due
      FROM unnest(v_new) AS n(id);
    IF cardinality(v_new) < v_n THEN
        FOR i IN
            SELECT u.o FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
             WHERE NOT EXISTS (SELECT 1 FROM unnest(v_new) AS n(id) WHERE n.id = u.id)
             ORDER BY u.o
        LOOP
            v_ids[i] := cairn.enqueue_existing(
                format('cairn.enqueue_many: item %s of %s', i, v_n), enqueue_many.workflow_name,
                idempotency_keys[i], inputs -> (i - 1), v_tenant, first_if_input_differs);
        END LOOP;
    END IF;
    IF cardinality(v_new) > 0 THEN
        v_ok := cairn.wake_claimers();
    END IF;
    RETURN v_ids;
END;
$$;

-- Cancels one instance. Returns what happened:
--   'cancelled'  it is cancelled now: nobody held it, and it has no cleanup to run (it never
--                started, its version has no finally blocks, or p_force);
--   'requested'  a runner holds it, or will (a claim, due now): that runner cancels it, running
--                the finally blocks around what it interrupts first unless p_force (normally
--                within a second; the cleanup may take longer, see CAIRN_CLEANUP_TIMEOUT);
--   'completed', 'failed', 'cancelled', 'timed_out' with a prefix 'already ': it had finished;
--                nothing changed (its result or error is kept).
-- p_force (cairnctl cancel --force) skips the cleanup, or abandons one under way: a held
-- instance is told so; one nobody holds is cancelled here. A cancel asked again without it
-- changes nothing about a cleanup under way.
-- Raises no_data_found (P0002) when there is no such instance. The instance's unfinished
-- descendants are cancelled first, and a child it cancels itself (nobody held it) is marked
-- parent_pending, so that a runner hands the outcome to its parent. Descendants first: a
-- child's final write locks the child's queue row, then its parent's (to wake it), and this
-- takes them in the same order, so the two never wait on each other in a cycle. When the
-- instance turns out unfinished although it had no queue row at first, cairn.retry queued it
-- again meanwhile: waiting for that row (a claim may hold it while it waits for the instance
-- row this holds) would deadlock, so NOWAIT makes the race a clear error (55P03, try again).
-- The NOTIFY carries the instance id alone: anyone may LISTEN on a channel, and a reason is the
-- canceller's text (the runner reads it from the row, which it checks anyway: anyone may NOTIFY
-- too).
CREATE OR REPLACE FUNCTION cairn.cancel(p_instance_id uuid, p_reason text DEFAULT NULL,
                                        p_force boolean DEFAULT false)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    q cairn.queued_instances%ROWTYPE;
    ri cairn.runner_instances%ROWTYPE;
    c record;
    reason text := left(coalesce(p_reason, 'cancelled'), 1000);
    force boolean := coalesce(p_force, false);
BEGIN
    FOR c IN
        SELECT r.instance_id FROM cairn.runner_instances r
         WHERE r.parent_id = p_instance_id AND r.status IN ('queued', 'running')
         ORDER BY r.instance_id
    LOOP
        PERFORM cairn.cancel(c.instance_id, reason, force);
    END LOOP;
    SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id FOR UPDATE;
    SELECT * INTO ri FROM cairn.runner_instances WHERE instance_id = p_instance_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF ri.status IN ('completed', 'failed', 'cancelled', 'timed_out') THEN
        RETURN 'already ' || ri.status;
    END IF;
    IF q.instance_id IS NULL THEN
        -- Retried while this cancel waited for the instance row: its new queue row, without
        -- waiting (see 0009).
        SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id
            FOR UPDATE NOWAIT;
    END IF;
    IF q.instance_id IS NOT NULL AND q.lock_uuid IS NOT NULL
       AND q.lock_expires_at > clock_timestamp() THEN
        UPDATE cairn.runner_instances
           SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
               cancel_reason = reason, cancel_force = cancel_force OR force
         WHERE instance_id = p_instance_id;
        PERFORM pg_notify('cairn_cancel', p_instance_id::text);
        RETURN 'requested';
    END IF;
    IF NOT force AND q.instance_id IS NOT NULL AND ri.started_at IS NOT NULL
       AND (ri.cleanup_until IS NULL OR ri.cleanup_until > clock_timestamp())
       AND EXISTS (SELECT 1 FROM cairn.workflow_versions v
                    WHERE v.id = ri.workflow_version_id AND v.cleanup) THEN
        -- Started, with finally blocks to run (or running them when its runner died): the next
        -- claim, due now, resumes it with the cancel.
        UPDATE cairn.runner_instances
           SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
               cancel_reason = reason
         WHERE instance_id = p_instance_id;
        UPDATE cairn.queued_instances SET scheduled_at = least(scheduled_at, clock_timestamp())
         WHERE instance_id = p_instance_id;
        PERFORM pg_notify('cairn_enqueue', '');
        RETURN 'requested';
    END IF;
    UPDATE cairn.runner_instances
       SET status = 'cancelled',
           error = jsonb_build_object('type', 'Cancelled', 'message', reason,
                                      'bases', jsonb_build_array('Exception'),
                                      'details', CASE WHEN ri.cleanup_until IS NOT NULL THEN
                                          jsonb_build_object('cleanup_abandoned',
                                              CASE WHEN force THEN 'cancelled with --force'
                                                   ELSE 'the cleanup did not finish in time'
                                              END) END),
           cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
           cancel_reason = reason, cancel_force = cancel_force OR force,
           completed_at = clock_timestamp(),
           parent_pending = parent_id IS NOT NULL AND NOT detached
     WHERE instance_id = p_instance_id;
    DELETE FROM cairn.queued_instances WHERE instance_id = p_instance_id;
    RETURN 'cancelled';
END
$$;

-- Queues a failed, cancelled or timed_out instance again (redrive). Returns 'queued', or
-- 'already queued' / 'already running' for an unfinished instance (nothing changes). Raises
-- no_data_found (P0002) for an unknown id and check_violation (23514) for a completed one.
-- Clears parent_pending: a child queued again answers its parent when it finishes again, not
-- with the outcome it is retried from.
CREATE OR REPLACE FUNCTION cairn.retry(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    ri cairn.runner_instances%ROWTYPE;
BEGIN
    SELECT * INTO ri FROM cairn.runner_instances WHERE instance_id = p_instance_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF ri.status IN ('queued', 'running') THEN
        RETURN 'already ' || ri.status;
    END IF;
    IF ri.status = 'completed' THEN
        RAISE EXCEPTION 'instance % completed: only failed, cancelled or timed_out instances '
                        'can be retried', p_instance_id
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO cairn.instance_history (instance_id, status, error, started_at, completed_at,
                                        reason)
    VALUES (ri.instance_id, ri.status, ri.error, ri.started_at, ri.completed_at,
            left(p_reason, 1000));
    UPDATE cairn.runner_instances
       SET status = 'queued', error = NULL, result = NULL, completed_at = NULL,
           cancel_requested_at = NULL, cancel_reason = NULL, cancel_force = false,
           cleanup_until = NULL, redrive = true, parent_pending = false,
           deadline_at = clock_timestamp() + timeout_ms * interval '1 millisecond'
     WHERE instance_id = p_instance_id;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (ri.instance_id, ri.workflow_version_id, ri.priority, clock_timestamp());
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN 'queued';
END
$$;

-- Times out the unfinished instances past their deadline that no live runner holds (a runner
-- that holds one times it out itself, with its running attempts), marking the children among
-- them parent_pending. Returns how many. One cleaning up after its timeout or a cancel is left
-- to the runner that resumes it until its cleanup_until (a cancel's is ended by cairn.cancel). The walk is bounded by now(), the calling statement's
-- start: a stable bound is an index condition on runner_instances_deadline, a volatile one a
-- filter over every unfinished instance that has a deadline (23 ms a call with 200 000 of them,
-- and every runner calls it every 2 s).
CREATE OR REPLACE FUNCTION cairn.expire_overdue() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT ri.instance_id, ri.timeout_ms, ri.cleanup_until, ri.cancel_requested_at,
               ri.started_at IS NOT NULL AND v.cleanup AS cleans
          FROM cairn.runner_instances ri
          JOIN cairn.workflow_versions v ON v.id = ri.workflow_version_id
         WHERE ri.deadline_at < now() AND ri.status IN ('queued', 'running')
         ORDER BY ri.deadline_at
         LIMIT 1000
    LOOP
        -- A cancel asked is the cancel sweep's to end (cairn.cancel); a started instance with
        -- finally blocks is left to a claim, which runs them, until its cleanup's bound.
        CONTINUE WHEN r.cancel_requested_at IS NOT NULL
                   OR (r.cleans AND coalesce(r.cleanup_until > clock_timestamp(), true));
        PERFORM 1 FROM cairn.queued_instances q
          WHERE q.instance_id = r.instance_id
            AND (q.lock_uuid IS NULL OR q.lock_expires_at <= clock_timestamp())
          FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        UPDATE cairn.runner_instances
           SET status = 'timed_out',
               error = jsonb_build_object(
                   'type', 'WorkflowTimeout',
                   'message', format('the instance did not finish within its timeout of %s ms',
                                     r.timeout_ms),
                   'bases', jsonb_build_array('TimeoutError', 'Exception'),
                   'details', CASE WHEN r.cleanup_until IS NOT NULL THEN
                       jsonb_build_object('cleanup_abandoned',
                                          'the cleanup did not finish in time') END),
               completed_at = clock_timestamp(),
               parent_pending = parent_id IS NOT NULL AND NOT detached
         WHERE instance_id = r.instance_id AND status IN ('queued', 'running');
        DELETE FROM cairn.queued_instances WHERE instance_id = r.instance_id;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
