-- SPDX-License-Identifier: MIT
-- 70_backfills.sql
--
-- Backfills (docs/operations.md "Backfills"): the state machine, creating one, the runners' tick
-- (counts, the next partitions, the state), pause, resume, cancel, retrying failed partitions,
-- and the status view.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

CREATE OR REPLACE FUNCTION cairn.check_backfill_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state = 'pending' AND NEW.state = 'running')
       OR (OLD.state = 'running' AND NEW.state IN ('paused', 'completed', 'failed'))
       OR (OLD.state = 'paused' AND NEW.state = 'resuming')
       OR (OLD.state = 'resuming' AND NEW.state = 'running')
       OR (OLD.state = 'failed' AND NEW.state = 'running')
       OR (OLD.state IN ('pending', 'running', 'paused', 'resuming', 'failed')
           AND NEW.state = 'cancelled') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'backfill %: state % -> % is not allowed', OLD.id, OLD.state, NEW.state
        USING ERRCODE = 'check_violation',
              HINT = 'pending -> running -> paused -> resuming -> running -> completed or '
                     'failed; failed -> running (retry_failed); cancelled from any but completed';
END
$$;

CREATE OR REPLACE TRIGGER backfills_state_transition
    BEFORE UPDATE OF state ON cairn.backfills
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION cairn.check_backfill_transition();

-- A partition's value as it goes into the input.
CREATE OR REPLACE FUNCTION cairn.backfill_value(b cairn.backfills, i integer) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE b.kind WHEN 'date' THEN to_jsonb((b.from_date + i * b.step_days)::text)
                       ELSE to_jsonb(b.from_int + i::bigint * b.step_int) END
$$;

-- Locks a backfill's row and returns its state; no_data_found (P0002) when there is none.
CREATE OR REPLACE FUNCTION cairn.backfill_lock(p_id uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    SELECT state INTO v_state FROM cairn.backfills WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no backfill %', p_id USING ERRCODE = 'no_data_found';
    END IF;
    RETURN v_state;
END
$$;

-- Creates a backfill of p_workflow (of the caller's tenant) over [p_from, p_to] (both dates
-- YYYY-MM-DD with a step of whole days or weeks: 1d, 7d, 1w, '3 days'; or both integers with a
-- positive integer step), passing each partition's value as the input p_param (a date as text
-- 'YYYY-MM-DD', an integer as a number) over p_input. Refuses what could not run: an unknown
-- workflow or version, a parameter the workflow's main does not take, inputs it needs and would
-- not get, a range whose start is after its end, a step that is not positive. Returns the id.
CREATE OR REPLACE FUNCTION cairn.backfill_create(
    p_workflow text, p_param text, p_from text, p_to text, p_step text,
    p_input jsonb DEFAULT '{}', p_concurrency integer DEFAULT 1, p_version text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_inputs text[];
    v_schema jsonb;
    v_refusal text;
    v_missing text[];
    v_from_d date;
    v_to_d date;
    v_step interval;
    v_days integer;
    v_from_i bigint;
    v_to_i bigint;
    v_step_i bigint;
    v_total bigint;
    v_kind text;
    v_id uuid;
BEGIN
    SELECT v.inputs, v.input_schema INTO v_inputs, v_schema
      FROM cairn.find_version('cairn.backfill_create', p_workflow, p_version) v;
    IF p_param IS NULL OR p_param !~ '^[A-Za-z_][A-Za-z0-9_]{0,63}$' THEN
        RAISE EXCEPTION 'cairn.backfill_create: the parameter "%" is not a name', p_param
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_input IS NULL OR jsonb_typeof(p_input) <> 'object' THEN
        RAISE EXCEPTION 'cairn.backfill_create: input must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_concurrency IS NULL OR p_concurrency < 1 OR p_concurrency > 10000 THEN
        RAISE EXCEPTION 'cairn.backfill_create: concurrency must be in 1..10000, got %',
            p_concurrency USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_inputs IS NOT NULL AND v_schema IS NULL THEN -- typed inputs: checked below
        IF NOT p_param = ANY (v_inputs) THEN
            RAISE EXCEPTION 'cairn.backfill_create: workflow "%" has no input "%" (its inputs: %)',
                p_workflow, p_param, coalesce(array_to_string(v_inputs, ', '), 'none')
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT array_agg(i) INTO v_missing FROM unnest(v_inputs) i
         WHERE i <> p_param AND NOT p_input ? i;
        IF v_missing IS NOT NULL THEN
            RAISE EXCEPTION 'cairn.backfill_create: --input lacks % of workflow "%"',
                array_to_string(v_missing, ', '), p_workflow
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF p_from ~ '^-?[0-9]{1,18}$' AND p_to ~ '^-?[0-9]{1,18}$' THEN
        v_kind := 'int';
        v_from_i := p_from::bigint;
        v_to_i := p_to::bigint;
        IF p_step !~ '^[0-9]{1,18}$' OR p_step::bigint < 1 THEN
            RAISE EXCEPTION 'cairn.backfill_create: an integer range needs a positive integer '
                'step, got "%"', p_step USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_step_i := p_step::bigint;
        IF v_from_i > v_to_i THEN
            RAISE EXCEPTION 'cairn.backfill_create: the range starts after it ends (% > %)',
                p_from, p_to USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_total := (v_to_i - v_from_i) / v_step_i + 1;
    ELSIF p_from ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' AND p_to ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' THEN
        v_kind := 'date';
        BEGIN
            v_from_d := p_from::date;
            v_to_d := p_to::date;
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
            RAISE EXCEPTION 'cairn.backfill_create: "%" or "%" is not a date', p_from, p_to
                USING ERRCODE = 'invalid_parameter_value';
        END;
        BEGIN
            v_step := regexp_replace(p_step, '^([0-9]+)w$', '\1 weeks')::interval;
        EXCEPTION WHEN OTHERS THEN
            v_step := NULL;
        END;
        IF v_step IS NULL OR extract(month FROM v_step) <> 0 OR extract(year FROM v_step) <> 0
           OR v_step <> justify_hours(date_trunc('day', v_step)) OR v_step < interval '1 day'
        THEN
            RAISE EXCEPTION 'cairn.backfill_create: a date range needs a step of whole days or '
                'weeks (1d, 7d, 2w), got "%"', p_step USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_days := extract(day FROM v_step)::integer;
        IF v_from_d > v_to_d THEN
            RAISE EXCEPTION 'cairn.backfill_create: the range starts after it ends (% > %)',
                p_from, p_to USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_total := (v_to_d - v_from_d) / v_days + 1;
    ELSE
        RAISE EXCEPTION 'cairn.backfill_create: the range must be two dates (YYYY-MM-DD) or two '
            'integers, got "%" and "%"', p_from, p_to USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_total > 1000000 THEN
        RAISE EXCEPTION 'cairn.backfill_create: % partitions, over the limit of 1000000', v_total
            USING ERRCODE = 'program_limit_exceeded', HINT = 'Use a larger step.';
    END IF;
    -- Typed inputs: every partition's input is p_input with p_param a value of the same kind,
    -- so the first one's check stands for all (cairn.enqueue's check, the same SQLSTATE).
    IF v_schema IS NOT NULL THEN
        v_refusal := cairn.input_refusal(v_schema, p_input || jsonb_build_object(p_param,
                         CASE v_kind WHEN 'int' THEN to_jsonb(v_from_i) ELSE to_jsonb(p_from) END),
                         p_workflow);
        IF v_refusal IS NOT NULL THEN
            RAISE EXCEPTION 'cairn.backfill_create: %', v_refusal
                USING ERRCODE = '22Z01',
                      HINT = format('cairnctl schema %s prints the inputs it takes.', p_workflow);
        END IF;
    END IF;
    INSERT INTO cairn.backfills (tenant_id, workflow_name, workflow_version, param, kind,
                                 range_from, range_to, step, from_date, step_days, from_int,
                                 step_int, total, input, concurrency)
    VALUES (cairn.current_tenant(), p_workflow, p_version, p_param, v_kind, p_from, p_to, p_step, v_from_d, v_days,
            v_from_i, v_step_i, v_total, p_input, p_concurrency)
    RETURNING id INTO v_id;
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END
$$;

-- One round over the active backfills nobody else is ticking (what each runner calls about once
-- a second): counts, the moving average, the next partitions (each of its backfill's tenant),
-- the state. Returns how many partitions it started. A partition that cannot be started (its
-- workflow version was deleted) pauses nothing: the backfill keeps its checkpoint and the
-- reason in `error`, and the next tick tries again.
CREATE OR REPLACE FUNCTION cairn.backfill_tick(p_max integer DEFAULT 1000) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    b cairn.backfills%ROWTYPE;
    d record;
    v_started integer := 0;
    v_state text;
    v_active integer;
    v_done integer;
    v_failed integer;
    v_ewma double precision;
    v_acc timestamptz;
    v_n integer;
    v_i integer;
    v_next integer;
    v_version_id uuid;
    v_timeout bigint;
    v_id uuid;
    v_error text;
    v_rate double precision;
    v_rate_at timestamptz;
    v_rate_done integer;
    v_dt double precision;
BEGIN
    FOR b IN SELECT * FROM cairn.backfills
              WHERE state IN ('pending', 'running', 'paused', 'resuming')
              ORDER BY updated_at FOR UPDATE SKIP LOCKED LOOP
        v_ewma := b.ewma_ms;
        v_acc := b.accounted_at;
        v_error := NULL;
        -- a = 0.2: the last ten partitions make up nine tenths of the average
        FOR d IN SELECT extract(epoch FROM ri.completed_at - ri.started_at) * 1000 AS ms,
                        ri.completed_at
                   FROM cairn.runner_instances ri
                  WHERE ri.backfill_id = b.id AND ri.status = 'completed'
                    AND ri.started_at IS NOT NULL
                    AND ri.completed_at > coalesce(b.accounted_at, '-infinity')
                  ORDER BY ri.completed_at LOOP
            v_ewma := CASE WHEN v_ewma IS NULL THEN d.ms ELSE 0.2 * d.ms + 0.8 * v_ewma END;
            v_acc := d.completed_at;
        END LOOP;
        SELECT count(*) FILTER (WHERE ri.status = 'completed'),
               count(*) FILTER (WHERE ri.status IN ('failed', 'cancelled', 'timed_out')),
               count(*) FILTER (WHERE ri.status IN ('queued', 'running'))
          INTO v_done, v_failed, v_active
          FROM cairn.runner_instances ri WHERE ri.backfill_id = b.id;
        v_state := CASE WHEN b.state IN ('pending', 'resuming') THEN 'running' ELSE b.state END;
        v_next := b.next_index;
        IF v_state = 'running' AND v_started < p_max THEN
            v_n := least(b.concurrency - v_active, b.total - b.next_index, p_max - v_started);
            IF v_n > 0 THEN
                SELECT v.id, v.timeout_ms INTO v_version_id, v_timeout
                  FROM cairn.workflow_versions v
                 WHERE v.tenant_id = b.tenant_id AND v.workflow_name = b.workflow_name
                   AND (b.workflow_version IS NULL OR v.workflow_version = b.workflow_version)
                 ORDER BY v.created_at DESC LIMIT 1;
                IF v_version_id IS NULL THEN
                    v_error := format('workflow "%s"%s is not registered', b.workflow_name,
                                      coalesce(' version ' || b.workflow_version, ''));
                    v_n := 0;
                END IF;
                FOR v_i IN b.next_index .. b.next_index + v_n - 1 LOOP
                    INSERT INTO cairn.runner_instances AS ri
                           (tenant_id, workflow_version_id, workflow_name, input, timeout_ms,
                            deadline_at, backfill_id, backfill_index)
                    VALUES (b.tenant_id, v_version_id, b.workflow_name,
                            b.input || jsonb_build_object(b.param, cairn.backfill_value(b, v_i)),
                            v_timeout,
                            clock_timestamp() + v_timeout * interval '1 millisecond', b.id, v_i)
                    ON CONFLICT (backfill_id, backfill_index) WHERE backfill_id IS NOT NULL
                    DO NOTHING
                    RETURNING ri.instance_id INTO v_id;
                    IF v_id IS NOT NULL THEN
                        INSERT INTO cairn.queued_instances
                               (instance_id, workflow_version_id, priority, scheduled_at)
                        VALUES (v_id, v_version_id, 0, clock_timestamp());
                        v_active := v_active + 1;
                        v_started := v_started + 1;
                    END IF;
                END LOOP;
                v_next := b.next_index + v_n;
            END IF;
            IF v_next >= b.total AND v_active = 0 THEN
                v_state := CASE WHEN v_failed > 0 THEN 'failed' ELSE 'completed' END;
            END IF;
        END IF;
        -- The throughput, only over time spent running: a pause is a gap, not a slow stretch.
        -- A sample spans at least a second (partitions finish in bursts, one per round of the
        -- concurrency: a shorter span would take a burst for the rate), from the tick that
        -- took the last sample to one that saw partitions finish since (a = 0.3).
        v_rate := b.rate_ps;
        v_rate_at := b.rate_at;
        v_rate_done := b.rate_done;
        IF v_state <> 'running' THEN
            v_rate_at := NULL;
            v_rate_done := v_done + v_failed;
        ELSIF b.rate_at IS NULL THEN
            v_rate_at := clock_timestamp();
            v_rate_done := v_done + v_failed;
        ELSIF v_done + v_failed > b.rate_done THEN
            v_dt := extract(epoch FROM clock_timestamp() - b.rate_at);
            IF v_dt >= 1 THEN
                v_rate := (v_done + v_failed - b.rate_done) / v_dt;
                v_rate := CASE WHEN b.rate_ps IS NULL THEN v_rate
                               ELSE 0.3 * v_rate + 0.7 * b.rate_ps END;
                v_rate_at := clock_timestamp();
                v_rate_done := v_done + v_failed;
            END IF;
        END IF;
        UPDATE cairn.backfills SET
               state = v_state, next_index = v_next, done = v_done, failed = v_failed,
               running = v_active, ewma_ms = v_ewma, accounted_at = v_acc, error = v_error,
               rate_ps = v_rate, rate_at = v_rate_at, rate_done = v_rate_done,
               started_at = coalesce(started_at, CASE WHEN v_state = 'running'
                                                      THEN clock_timestamp() END),
               finished_at = CASE WHEN v_state IN ('completed', 'failed')
                                  THEN clock_timestamp() END,
               updated_at = clock_timestamp()
         WHERE id = b.id;
    END LOOP;
    IF v_started > 0 THEN
        PERFORM pg_notify('cairn_enqueue', '');
    END IF;
    RETURN v_started;
END
$$;

-- Moves backfill p_id from state p_from to p_to for the command that `p_done` it (pause,
-- resume); any other state is refused (55000): 'backfill ID is STATE: only a FROM backfill can
-- be DONE'. Returns p_to. Not a definer: it runs with the rights of the API function calling it.
CREATE OR REPLACE FUNCTION cairn.backfill_move(p_id uuid, p_from text, p_to text, p_done text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_state text;
BEGIN
    v_state := cairn.backfill_lock(p_id);
    IF v_state <> p_from THEN
        RAISE EXCEPTION 'backfill % is %: only a % backfill can be %', p_id, v_state, p_from,
            p_done USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE cairn.backfills SET state = p_to, updated_at = clock_timestamp() WHERE id = p_id;
    RETURN p_to;
END
$$;

-- Pausing: only a running backfill; nothing new starts, the running partitions finish.
CREATE OR REPLACE FUNCTION cairn.backfill_pause(p_id uuid) RETURNS text
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    SELECT cairn.backfill_move(p_id, 'running', 'paused', 'paused')
$$;

-- Resuming: only a paused backfill; it goes on from its checkpoint at the next tick.
CREATE OR REPLACE FUNCTION cairn.backfill_resume(p_id uuid) RETURNS text
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    SELECT cairn.backfill_move(p_id, 'paused', 'resuming', 'resumed');
    SELECT pg_notify('cairn_enqueue', '');
    SELECT 'resuming'::text
$$;

-- Cancelling: starts nothing more and cancels the partitions not finished (cairn.cancel).
-- Returns how many partitions it cancelled or asked to cancel.
CREATE OR REPLACE FUNCTION cairn.backfill_cancel(p_id uuid, p_reason text DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_state text;
    v_n integer := 0;
    v record;
BEGIN
    v_state := cairn.backfill_lock(p_id);
    IF v_state IN ('completed', 'cancelled') THEN
        RAISE EXCEPTION 'backfill % is already %', p_id, v_state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    UPDATE cairn.backfills SET state = 'cancelled', finished_at = clock_timestamp(),
           updated_at = clock_timestamp() WHERE id = p_id;
    FOR v IN SELECT ri.instance_id FROM cairn.runner_instances ri
              WHERE ri.backfill_id = p_id AND ri.status IN ('queued', 'running')
              ORDER BY ri.instance_id LOOP
        PERFORM cairn.cancel(v.instance_id, coalesce(p_reason, 'backfill cancelled'));
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;

-- Runs the failed (or cancelled, or timed out) partitions again (cairn.retry: what they had
-- recorded is kept) and the backfill goes on; a failed backfill is running again. Returns how
-- many partitions it queued again.
CREATE OR REPLACE FUNCTION cairn.backfill_retry_failed(p_id uuid) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_state text;
    v_n integer := 0;
    v record;
BEGIN
    v_state := cairn.backfill_lock(p_id);
    IF v_state IN ('cancelled', 'completed') THEN
        RAISE EXCEPTION 'backfill % is %: nothing to retry', p_id, v_state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    FOR v IN SELECT ri.instance_id FROM cairn.runner_instances ri
              WHERE ri.backfill_id = p_id AND ri.status IN ('failed', 'cancelled', 'timed_out')
              ORDER BY ri.backfill_index LOOP
        PERFORM cairn.retry(v.instance_id, 'backfill retry-failed');
        v_n := v_n + 1;
    END LOOP;
    IF v_state = 'failed' THEN
        UPDATE cairn.backfills SET state = 'running', finished_at = NULL,
               updated_at = clock_timestamp() WHERE id = p_id;
    END IF;
    RETURN v_n;
END
$$;

-- Each backfill with its progress: partitions done, failed, running and remaining (not
-- finished), the moving average of a partition's duration, the rate (partitions finished a
-- minute while running, a moving average) and the ETA from it (NULL while paused or finished,
-- and for the first second or so of running).
CREATE OR REPLACE VIEW cairn.backfill_status WITH (security_invoker = true) AS
SELECT b.id, b.workflow_name, b.param, b.kind, b.range_from, b.range_to, b.step, b.state,
       b.concurrency, b.total, b.next_index, b.done, b.failed, b.running,
       b.total - b.done - b.failed AS remaining, b.ewma_ms,
       b.rate_ps * 60 AS per_minute,
       CASE WHEN b.state IN ('running', 'resuming', 'pending') AND b.rate_ps > 0
            THEN make_interval(secs => (b.total - b.done - b.failed) / b.rate_ps) END AS eta,
       b.error, b.created_at, b.started_at, b.finished_at, b.updated_at
  FROM cairn.backfills b;
