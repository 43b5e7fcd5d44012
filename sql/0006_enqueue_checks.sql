-- SPDX-License-Identifier: MIT
-- 0006: cairn.enqueue checks its arguments against the engine's limits, which cairn.limits()
-- states once (docs/operations.md "Limits" explains each). Before this, an input the runner
-- cannot load (too deep, a number outside int64 or float64) was accepted and failed at run time
-- with a misleading error, a key beyond the B-tree row size failed with the raw index error, and
-- an instance scheduled at 'infinity' never ran.

-- The limits as one row. cairnctl checks the same figures (runner/ctl/ctl.h) before it calls
-- cairn.enqueue; a test holds the two to the same values.
CREATE FUNCTION cairn.limits(
    OUT input_bytes integer,
    OUT value_depth integer,
    OUT idempotency_key_bytes integer
)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- input_bytes: the input travels in every claim (up to 256 instances at once) and its values
    -- stay in the snapshot rewritten after every step, so it must stay small; larger data goes
    -- by reference. value_depth: IR_VALUE_MAX_DEPTH, the deepest value the runner can load and
    -- snapshot. idempotency_key_bytes: far below the B-tree row limit (about 2.7 kB) of the
    -- unique index on the key, and long enough for any identifier or a hex SHA-256.
    SELECT 262144, 32, 255
$$;

-- Same signature, defaults and behaviour as in 0002, plus the checks. Every check runs before
-- the idempotency lookup: a request is refused for what it is, whichever key it carries.
CREATE OR REPLACE FUNCTION cairn.enqueue(
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
    v_lim record;
    v_len integer;
    v_num numeric;
BEGIN
    SELECT * INTO v_lim FROM cairn.limits();
    IF input IS NULL OR jsonb_typeof(input) <> 'object' THEN
        RAISE EXCEPTION 'cairn.enqueue: input must be a JSON object, got %',
            coalesce(jsonb_typeof(input), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Measured as PostgreSQL prints it (what the runner reads back), before the walks below,
    -- so that they only ever see a bounded document.
    v_len := octet_length(enqueue.input::text);
    IF v_len > v_lim.input_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: input is % bytes of JSON, over the limit of % bytes',
            v_len, v_lim.input_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Pass large data by reference (a URL, a row id) and let an action '
                         'fetch it. SELECT * FROM cairn.limits() lists the limits.';
    END IF;
    -- The top object is at level 1 and jsonpath counts it as level 0, so anything at jsonpath
    -- level value_depth is one level too deep. The walk stops at that level.
    IF jsonb_path_exists(enqueue.input,
                         format('strict $.**{%s}', v_lim.value_depth)::jsonpath) THEN
        RAISE EXCEPTION 'cairn.enqueue: input is nested deeper than % levels', v_lim.value_depth
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'The top object is level 1; each array or object adds one.';
    END IF;
    -- jsonb keeps numbers exactly, the runner does not: one printed without a fraction (jsonb
    -- prints 1e19 as 10000000000000000000) must fit int64, any other a finite float64, i.e.
    -- stay below 2^1024 - 2^970, from which strtod rounds to infinity. Only numbers of at least
    -- 2^63 in magnitude can fail either test, and jsonpath finds those without leaving C (in
    -- strict mode .abs() of anything but a number is an error, which a filter counts as false;
    -- measured, twice as fast as testing .type() first).
    SELECT q.n::numeric INTO v_num
      FROM jsonb_path_query(enqueue.input, 'strict $.** ? (@.abs() >= 9223372036854775808)')
           AS q(n)
     WHERE (scale(q.n::numeric) = 0 AND q.n::numeric <> -9223372036854775808)
        OR abs(q.n::numeric) >= 2::numeric ^ 1024 - 2::numeric ^ 970
     LIMIT 1;
    IF v_num IS NOT NULL AND scale(v_num) = 0 THEN
        RAISE EXCEPTION 'cairn.enqueue: input holds the integer %, outside the 64-bit range',
            CASE WHEN length(v_num::text) > 24 THEN left(v_num::text, 20) || '... ('
                 || length(v_num::text) || ' digits)' ELSE v_num::text END
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Integers must lie in -9223372036854775808..9223372036854775807. '
                         'jsonb stores a number without a fraction, such as 1e19, as an '
                         'integer: write a float with a fraction (10000000000000000000.0).';
    ELSIF v_num IS NOT NULL THEN
        RAISE EXCEPTION 'cairn.enqueue: input holds the number %, beyond the largest float',
            left(v_num::text, 20) || '... (' || length(v_num::text) || ' characters)'
            USING ERRCODE = 'numeric_value_out_of_range',
                  HINT = 'Floats are 64-bit: their magnitude must stay below about 1.8e308.';
    END IF;
    IF enqueue.idempotency_key = '' THEN
        RAISE EXCEPTION 'cairn.enqueue: the idempotency key is empty'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(enqueue.idempotency_key) > v_lim.idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: the idempotency key is % bytes, over the limit of % bytes',
            octet_length(enqueue.idempotency_key), v_lim.idempotency_key_bytes
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Use a digest of a longer key (a hex SHA-256 is 64 bytes).';
    END IF;
    IF NOT isfinite(enqueue.scheduled_at) THEN
        RAISE EXCEPTION 'cairn.enqueue: scheduled_at must be a finite time, got %',
            enqueue.scheduled_at
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL means now.';
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
