-- SPDX-License-Identifier: MIT
-- 35_signals.sql
--
-- Signals and keyed events (docs/semantics.md "Waiting for the outside world", docs/operations.md
-- "Signals and events"): sending a signal to an instance, publishing a keyed event, and the
-- runner's side, which registers, expires and withdraws the waits of its writes.
--
-- How a send and a wait meet, once: a wait is registered by the runner's fenced write, which
-- holds the instance's queue row (FOR UPDATE, cairn_fence) and takes the oldest buffered signal
-- of its names, or the first event of its name and key the instance has not taken; if there is
-- none it leaves a row in cairn.waits. A signal locks the same queue row before it looks: the
-- two are serialised, and whichever commits second sees the other. An event is not addressed
-- to an instance, so it cannot lock the rows of waits yet to come: cairn.publish_event holds
-- the event's advisory lock (cairn.event_lock_key) exclusively while it inserts and looks, and
-- a write that registers event waits takes those keys shared before its fence. A send that
-- finds a wait records the wait's result (runner_actions_done, status 'json': the JSON text),
-- drops the wait, marks the instance woken and due now, and NOTIFYs cairn_child with
-- "instance exec attempt", which the runner holding the instance reads as the call's result,
-- as it does a child's outcome; an instance handed back is claimed again. A lost notification
-- costs latency: the holder hands the instance back after its quiet time, and the claim reads
-- the result.
--
-- Lock order: advisory event keys (sorted), then queue rows in instance id order, as the
-- fence; a send holds nothing else while it waits. No cycle with the writes or wake_parents.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). The API's writing functions are SECURITY DEFINER, owned by cairn_api
-- (90_api_owner.sql).

-- The advisory lock of an event name and key (two-key form: a space apart from the one-key
-- locks; the class 0x65766e74, "evnt", apart from the limits' 0x63617972).
CREATE OR REPLACE FUNCTION cairn.event_lock_key(p_tenant text, p_name text, p_key text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT hashtext(p_tenant || '/' || p_name || '/' || p_key)
$$;

CREATE OR REPLACE FUNCTION cairn.event_lock_class() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1702260340 $$;

-- The bounds of signals (docs/operations.md "Limits"): at most this many unconsumed signals per
-- instance (a sender far ahead of the workflow is refused rather than filling the table), names
-- of at most this many characters (the language's bound), payloads as inputs (cairn.limits()).
CREATE OR REPLACE FUNCTION cairn.signal_limits(OUT max_pending integer, OUT name_chars integer)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 10000, 128 $$;

-- Answers wait (p_instance, p_exec, p_attempt) with p_value: records it as the wait's result,
-- drops the wait's row, wakes the instance and tells its holder, or, for an instance handed
-- back, the claimers (cairn_enqueue: without it the instance waited for a claimer's next poll,
-- 129 ms at the median in bench/signal-latency; one notification per transaction, however many
-- waits a publish answers). The caller holds the queue row.
CREATE OR REPLACE FUNCTION cairn.answer_wait(p_instance uuid, p_exec uuid, p_attempt integer,
                                             p_value jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result)
    VALUES (p_instance, p_exec, p_attempt, 'json', convert_to(p_value::text, 'UTF8'));
    DELETE FROM cairn.waits
     WHERE instance_id = p_instance AND execution_id = p_exec AND attempt = p_attempt;
    UPDATE cairn.queued_instances
       SET woken = true, scheduled_at = least(scheduled_at, clock_timestamp())
     WHERE instance_id = p_instance AND NOT woken;
    PERFORM pg_notify('cairn_child', p_instance::text || ' ' || p_exec::text || ' ' || p_attempt);
    PERFORM pg_notify('cairn_enqueue', '');
END
$$;

-- The common checks of a send: the name (non-empty, at most name_chars) and the payload
-- (cairn.check_value). p_caller names the function in the messages.
CREATE OR REPLACE FUNCTION cairn.check_send(p_caller text, p_what text, p_name text,
                                            p_payload jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_name IS NULL OR p_name = '' OR char_length(p_name) > (cairn.signal_limits()).name_chars
    THEN
        RAISE EXCEPTION '%: the % name must have 1 to % characters, got "%"', p_caller, p_what,
            (cairn.signal_limits()).name_chars, left(coalesce(p_name, ''), 40)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION '%: the payload is NULL', p_caller
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Send JSON null as ''null''.';
    END IF;
    PERFORM cairn.check_value(p_caller, 'the payload', p_payload, (cairn.limits()).input_bytes,
                              (cairn.limits()).value_depth);
END
$$;

-- cairn.signal sends signal p_name with p_payload to instance p_instance_id. Returns
--   'delivered'    a wait of the instance took it (recorded as the wait's result; the instance
--                  is woken);
--   'buffered'     no wait of that name is registered: kept for the instance's next one;
--   'duplicate'    a signal with this p_dedup_key was sent to the instance before: nothing
--                  changed (also once the instance has ended);
--   'not waiting'  with p_only_if_waiting, when nothing waits for it: nothing is stored.
-- Refuses: no such instance (or one of another tenant) no_data_found (P0002); an instance that
-- has ended object_not_in_prerequisite_state (55000); a name its version never waits for
-- invalid_parameter_value (22023); a payload over the limits, or more than max_pending
-- unconsumed signals, program_limit_exceeded (54000). Sends to one instance are consumed in the
-- order they commit: each locks the instance's queue row first.
-- cairn.signal's body, sending as p_sent_by (what cairn.signals.sent_by records: the API's
-- caller, or the instance whose `signal` it is). Not SECURITY DEFINER: called by cairn.signal
-- (as cairn_api, row security as its caller's) and by cairn.runner_signals (as the runner).
CREATE OR REPLACE FUNCTION cairn.send_signal(p_instance_id uuid, p_name text, p_payload jsonb,
                                             p_dedup_key text, p_only_if_waiting boolean,
                                             p_sent_by text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_queued boolean;
    v_status text;
    v_workflow text;
    v_names text[];
    w record;
    v_pending integer;
BEGIN
    PERFORM cairn.check_send('cairn.signal', 'signal', p_name, p_payload);
    IF p_dedup_key = '' OR octet_length(p_dedup_key) > (cairn.limits()).idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.signal: the dedup key must have 1 to % bytes',
            (cairn.limits()).idempotency_key_bytes
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    PERFORM 1 FROM cairn.queued_instances WHERE instance_id = p_instance_id FOR UPDATE;
    v_queued := FOUND;
    SELECT ri.status, ri.workflow_name, v.signals INTO v_status, v_workflow, v_names
      FROM cairn.runner_instances ri JOIN cairn.workflow_versions v ON v.id = ri.workflow_version_id
     WHERE ri.instance_id = p_instance_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.signal: no instance %', p_instance_id
            USING ERRCODE = 'no_data_found';
    END IF;
    IF p_dedup_key IS NOT NULL AND EXISTS (
           SELECT 1 FROM cairn.signals s
            WHERE s.instance_id = p_instance_id AND s.dedup_key = p_dedup_key) THEN
        RETURN 'duplicate';
    END IF;
    IF NOT v_queued THEN
        RAISE EXCEPTION 'cairn.signal: instance % has ended (%)', p_instance_id, v_status
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Signals go to instances that have not finished.';
    END IF;
    IF NOT p_name = ANY (v_names) THEN
        RAISE EXCEPTION 'cairn.signal: workflow % never waits for signal "%"', v_workflow, p_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = CASE WHEN cardinality(v_names) = 0
                              THEN 'It has no wait for a signal.'
                              ELSE 'Its waits take: ' || array_to_string(v_names, ', ') END;
    END IF;
    -- The oldest wait of that name: a wait with pending signals of its names took them when it
    -- was registered, so none waits while older signals are buffered for it.
    SELECT wt.execution_id, wt.attempt, cardinality(wt.names) > 1 AS several INTO w
      FROM cairn.waits wt
     WHERE wt.instance_id = p_instance_id AND NOT wt.event AND p_name = ANY (wt.names)
     ORDER BY wt.since, wt.execution_id
     LIMIT 1;
    IF FOUND THEN
        INSERT INTO cairn.signals (instance_id, name, payload, dedup_key, sent_by, consumed_exec,
                                   consumed_attempt, consumed_at)
        VALUES (p_instance_id, p_name, p_payload, p_dedup_key, p_sent_by,
                w.execution_id, w.attempt, clock_timestamp());
        PERFORM cairn.answer_wait(p_instance_id, w.execution_id, w.attempt,
                                  CASE WHEN w.several THEN jsonb_build_array(p_name, p_payload)
                                       ELSE p_payload END);
        RETURN 'delivered';
    END IF;
    IF p_only_if_waiting THEN
        RETURN 'not waiting';
    END IF;
    SELECT count(*) INTO v_pending FROM cairn.signals s
     WHERE s.instance_id = p_instance_id AND s.consumed_at IS NULL;
    IF v_pending >= (cairn.signal_limits()).max_pending THEN
        RAISE EXCEPTION 'cairn.signal: instance % holds % unconsumed signals, the most it may',
            p_instance_id, v_pending
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'Its waits are far behind its senders; SELECT * FROM '
                         'cairn.signal_limits() lists the limits.';
    END IF;
    INSERT INTO cairn.signals (instance_id, name, payload, dedup_key, sent_by)
    VALUES (p_instance_id, p_name, p_payload, p_dedup_key, p_sent_by);
    RETURN 'buffered';
END
$$;

-- cairn.signal itself (its contract above cairn.send_signal): the caller is the sender.
CREATE OR REPLACE FUNCTION cairn.signal(p_instance_id uuid, p_name text,
                                        p_payload jsonb DEFAULT 'null',
                                        p_dedup_key text DEFAULT NULL,
                                        p_only_if_waiting boolean DEFAULT false)
RETURNS text
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
    SELECT cairn.send_signal(p_instance_id, p_name, p_payload, p_dedup_key, p_only_if_waiting,
                             cairn.api_caller())
$$;

-- Signal with start: the instance of p_workflow with idempotency key p_idempotency_key (enqueued
-- now with p_input if there is none), then signal p_name to it, in one transaction: the signal is
-- kept from the instance's first moment. Returns the instance and what became of the signal
-- (cairn.signal).
CREATE OR REPLACE FUNCTION cairn.signal_with_start(p_workflow text, p_idempotency_key text,
                                                   p_name text, p_payload jsonb DEFAULT 'null',
                                                   p_input jsonb DEFAULT '{}',
                                                   p_dedup_key text DEFAULT NULL,
                                                   OUT instance_id uuid, OUT signal text)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
BEGIN
    IF p_idempotency_key IS NULL THEN
        RAISE EXCEPTION 'cairn.signal_with_start: an idempotency key is needed'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'It names the instance to signal, or to start and signal.';
    END IF;
    -- p_input only starts the instance: one found by its key is signalled whatever it started
    -- with.
    instance_id := cairn.enqueue(p_workflow, p_input, p_idempotency_key,
                                 first_if_input_differs => true);
    signal := cairn.signal(instance_id, p_name, p_payload, p_dedup_key);
END
$$;

-- Publishes keyed event p_name with key p_key in the caller's tenant: every instance waiting on
-- that name and key takes it now; any other instance of the tenant created before now takes it
-- with its next wait on them (once per instance). Returns the event's id, how many waits it
-- answered, and whether it was a duplicate (p_dedup_key seen before for that name and key:
-- nothing changed, the first event's id).
--
-- Set-based, as cairn.answer_wait does for one wait: the waiters' queue rows locked in one
-- statement (instance id order, as the fence), then each instance's oldest wait on the name and
-- key answered by one statement per table. One instance at a time cost 0.65 ms per waiter
-- (10 000 waiters: 6.5 s, set-based 0.44 s; bench/RESULTS.md "Signals and keyed events"). No
-- wait on the key can appear meanwhile (the event's lock, held exclusively, keeps registering
-- writes out) and none of the locked instances' waits can change (their writes hold the same
-- rows), so the second statement, with its new snapshot, sees exactly the waits to answer.
CREATE OR REPLACE FUNCTION cairn.publish_event(p_name text, p_key text,
                                               p_payload jsonb DEFAULT 'null',
                                               p_dedup_key text DEFAULT NULL,
                                               OUT event_id bigint, OUT woken integer,
                                               OUT duplicate boolean)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    PERFORM cairn.check_send('cairn.publish_event', 'event', p_name, p_payload);
    IF p_key IS NULL OR octet_length(p_key) > (cairn.limits()).idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.publish_event: the key must be text of at most % bytes',
            (cairn.limits()).idempotency_key_bytes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(cairn.event_lock_class(),
                                  cairn.event_lock_key(v_tenant, p_name, p_key));
    woken := 0;
    duplicate := false;
    IF p_dedup_key IS NOT NULL THEN
        SELECT e.id INTO event_id FROM cairn.events e
         WHERE e.tenant_id = v_tenant AND e.name = p_name AND e.key = p_key
           AND e.dedup_key = p_dedup_key;
        IF FOUND THEN
            duplicate := true;
            RETURN;
        END IF;
    END IF;
    INSERT INTO cairn.events (tenant_id, name, key, payload, dedup_key, published_by)
    VALUES (v_tenant, p_name, p_key, p_payload, p_dedup_key, cairn.api_caller())
    RETURNING id INTO event_id;
    PERFORM count(*) FROM (
        SELECT q.instance_id FROM cairn.queued_instances q
         WHERE q.instance_id IN (SELECT wt.instance_id FROM cairn.waits wt
                                  WHERE wt.event AND wt.tenant_id = v_tenant
                                    AND wt.names[1] = p_name AND wt.key = p_key)
         ORDER BY q.instance_id FOR UPDATE) locked;
    WITH pick AS (
        SELECT DISTINCT ON (wt.instance_id) wt.instance_id, wt.execution_id, wt.attempt
          FROM cairn.waits wt
         WHERE wt.event AND wt.tenant_id = v_tenant AND wt.names[1] = p_name AND wt.key = p_key
         ORDER BY wt.instance_id, wt.since, wt.execution_id
    ), took AS (
        INSERT INTO cairn.event_reads (instance_id, event_id, execution_id, attempt)
        SELECT pick.instance_id, event_id, pick.execution_id, pick.attempt FROM pick
        ON CONFLICT DO NOTHING
        RETURNING instance_id, execution_id, attempt
    ), answered AS (
        INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status, result)
        SELECT took.instance_id, took.execution_id, took.attempt, 'json',
               convert_to(p_payload::text, 'UTF8') FROM took
        RETURNING instance_id, execution_id, attempt
    ), dropped AS (
        DELETE FROM cairn.waits wt USING answered a
         WHERE wt.instance_id = a.instance_id AND wt.execution_id = a.execution_id
           AND wt.attempt = a.attempt
    ), woke AS (
        UPDATE cairn.queued_instances q
           SET woken = true, scheduled_at = least(q.scheduled_at, clock_timestamp())
          FROM answered a WHERE q.instance_id = a.instance_id AND NOT q.woken
    )
    SELECT count(*) INTO woken
      FROM answered a
     CROSS JOIN LATERAL pg_notify('cairn_child', a.instance_id::text || ' '
                                                 || a.execution_id::text || ' ' || a.attempt) n;
    IF woken > 0 THEN
        PERFORM pg_notify('cairn_enqueue', '');
    END IF;
END
$$;

-- The runner's side (persist statement cairn_waits, after the results): for each wait of the
-- batch's writes, under the write's claim token (a write whose token is gone touches nothing and
-- gets no row), one operation:
--   'register'  answered already (by a send, or an earlier write): that answer; else the oldest
--               buffered signal of its names, or the first event of its name and key the
--               instance has not taken, is taken now and recorded as its result; else it waits
--               (a row of cairn.waits; registering again changes nothing);
--   'expire'    as register, but when nothing is there its timeout answers it: p_tok / p_tval,
--               the runner's msgpack of the default value or the WaitTimeout error;
--   'drop'      the step stopped waiting: the row goes, and what was delivered to it and not
--               taken by the step (its result) is given back: the signal buffered again, the
--               event to be taken again.
-- Returns one row per wait: its status ('waiting', 'answered', 'dropped') and, answered, the
-- result as stored (json: JSON text, else msgpack of the runner's).
CREATE OR REPLACE FUNCTION cairn.runner_waits(p_instance uuid[], p_lock uuid[], p_exec uuid[],
                                              p_attempt integer[], p_op text[],
                                              p_event boolean[], p_names text[], p_key text[],
                                              p_timeout_at bigint[], p_tok boolean[],
                                              p_tval bytea[])
RETURNS TABLE (instance_id uuid, execution_id uuid, attempt integer, status text, ok boolean,
               json boolean, result bytea)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
    d record;
    s record;
    v_tenant text;
    v_created timestamptz;
    v_names text[];
    v_took boolean;
BEGIN
    FOR r IN
        SELECT * FROM unnest(p_instance, p_lock, p_exec, p_attempt, p_op, p_event, p_names, p_key,
                             p_timeout_at, p_tok, p_tval)
                   AS t(i, l, e, a, op, ev, nm, k, tat, tok, tval)
    LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM cairn.queued_instances q
                                   WHERE q.instance_id = r.i AND q.lock_uuid = r.l);
        instance_id := r.i;
        execution_id := r.e;
        attempt := r.a;
        ok := NULL;
        json := NULL;
        result := NULL;
        IF r.op = 'drop' THEN
            DELETE FROM cairn.waits wt
             WHERE wt.instance_id = r.i AND wt.execution_id = r.e AND wt.attempt = r.a;
            UPDATE cairn.signals sg SET consumed_exec = NULL, consumed_attempt = NULL,
                                        consumed_at = NULL
             WHERE sg.instance_id = r.i AND sg.consumed_exec = r.e AND sg.consumed_attempt = r.a;
            DELETE FROM cairn.event_reads er
             WHERE er.instance_id = r.i AND er.execution_id = r.e AND er.attempt = r.a;
            DELETE FROM cairn.runner_actions_done dn
             WHERE dn.instance_id = r.i AND dn.execution_id = r.e AND dn.attempt = r.a
               AND dn.status = 'json';
            status := 'dropped';
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT dn.status, dn.result INTO d FROM cairn.runner_actions_done dn
         WHERE dn.instance_id = r.i AND dn.execution_id = r.e AND dn.attempt = r.a
         ORDER BY dn.id DESC LIMIT 1;
        IF FOUND THEN
            status := 'answered';
            ok := d.status <> 'error';
            json := d.status = 'json';
            result := d.result;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT ri.tenant_id, ri.created_at INTO v_tenant, v_created
          FROM cairn.runner_instances ri WHERE ri.instance_id = r.i;
        v_names := string_to_array(r.nm, ',');
        IF r.ev THEN
            SELECT ev.id, ev.payload INTO s FROM cairn.events ev
             WHERE ev.tenant_id = v_tenant AND ev.name = r.nm AND ev.key = r.k
               AND ev.published_at >= v_created
               AND NOT EXISTS (SELECT 1 FROM cairn.event_reads er
                                WHERE er.instance_id = r.i AND er.event_id = ev.id)
             ORDER BY ev.id LIMIT 1;
            v_took := FOUND;
            IF v_took THEN
                INSERT INTO cairn.event_reads (instance_id, event_id, execution_id, attempt)
                VALUES (r.i, s.id, r.e, r.a);
            END IF;
        ELSE
            SELECT sg.id, sg.name, sg.payload INTO s FROM cairn.signals sg
             WHERE sg.instance_id = r.i AND sg.consumed_at IS NULL AND sg.name = ANY (v_names)
             ORDER BY sg.id LIMIT 1;
            v_took := FOUND;
            IF v_took THEN
                UPDATE cairn.signals sg SET consumed_exec = r.e, consumed_attempt = r.a,
                                            consumed_at = clock_timestamp()
                 WHERE sg.id = s.id;
                IF cardinality(v_names) > 1 THEN
                    s.payload := jsonb_build_array(s.name, s.payload);
                END IF;
            END IF;
        END IF;
        IF v_took THEN
            INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,
                                                   result)
            VALUES (r.i, r.e, r.a, 'json', convert_to(s.payload::text, 'UTF8'));
            DELETE FROM cairn.waits wt
             WHERE wt.instance_id = r.i AND wt.execution_id = r.e AND wt.attempt = r.a;
            status := 'answered';
            ok := true;
            json := true;
            result := convert_to(s.payload::text, 'UTF8');
        ELSIF r.op = 'expire' THEN
            INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,
                                                   result)
            VALUES (r.i, r.e, r.a, CASE WHEN r.tok THEN 'ok' ELSE 'error' END, r.tval);
            DELETE FROM cairn.waits wt
             WHERE wt.instance_id = r.i AND wt.execution_id = r.e AND wt.attempt = r.a;
            status := 'answered';
            ok := r.tok;
            json := false;
            result := r.tval;
        ELSE
            INSERT INTO cairn.waits AS wt (instance_id, execution_id, attempt, tenant_id, event,
                                           names, key, timeout_at)
            VALUES (r.i, r.e, r.a, v_tenant, r.ev, v_names, r.k,
                    CASE WHEN r.tat > 0 THEN to_timestamp(r.tat / 1000.0) END)
            ON CONFLICT DO NOTHING;
            status := 'waiting';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- What each unfinished instance waits for outside itself, for inspect, the status page and
-- operators: one row per registered wait.
CREATE OR REPLACE VIEW cairn.instance_waits WITH (security_invoker = true) AS
SELECT wt.instance_id, ri.workflow_name, wt.tenant_id,
       CASE WHEN wt.event THEN 'event' ELSE 'signal' END AS kind, wt.names, wt.key, wt.since,
       wt.timeout_at, wt.execution_id, wt.attempt,
       (SELECT count(*) FROM cairn.signals sg
         WHERE sg.instance_id = wt.instance_id AND sg.consumed_at IS NULL) AS buffered
  FROM cairn.waits wt JOIN cairn.runner_instances ri ON ri.instance_id = wt.instance_id;

-- The runner's side of `signal s(to=id, payload=v)` (persist statement cairn_signals, after the
-- published values): for each signal of the batch's writes, under the write's claim token (a
-- write whose token is gone sends nothing and gets no row), the send that cairn.signal makes,
-- as the sending instance (sent_by 'instance ID'), under the dedup key of the call's execution
-- and attempt, and its answer recorded as the call's result (runner_actions_done, 'json'): the
-- signal is sent once, and a write made again finds the answer. A receiver of another tenant
-- is refused as one that does not exist; a refusal (no such instance, one that has ended, a
-- name its workflow never waits for, a limit or a payload number out of range) stores nothing
-- and comes back as the status 'not_found', 'ended', 'unknown_name' or 'limit', with
-- cairn.signal's message. The fence of
-- the write holds the receivers' queue rows already, in its order.
CREATE OR REPLACE FUNCTION cairn.runner_signals(p_instance uuid[], p_lock uuid[], p_exec uuid[],
                                                p_attempt integer[], p_to uuid[],
                                                p_name text[], p_payload text[])
RETURNS TABLE (instance_id uuid, execution_id uuid, attempt integer, status text,
               message text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
    v_answer bytea;
BEGIN
    FOR r IN
        SELECT * FROM unnest(p_instance, p_lock, p_exec, p_attempt, p_to, p_name, p_payload)
                   AS t(i, l, e, a, dst, nm, pl)
    LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM cairn.queued_instances q
                                   WHERE q.instance_id = r.i AND q.lock_uuid = r.l);
        instance_id := r.i;
        execution_id := r.e;
        attempt := r.a;
        message := NULL;
        SELECT dn.result INTO v_answer FROM cairn.runner_actions_done dn
         WHERE dn.instance_id = r.i AND dn.execution_id = r.e AND dn.attempt = r.a
           AND dn.status = 'json'
         ORDER BY dn.id DESC LIMIT 1;
        IF FOUND THEN
            status := convert_from(v_answer, 'UTF8')::jsonb #>> '{}';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM cairn.runner_instances s, cairn.runner_instances d
                        WHERE s.instance_id = r.i AND d.instance_id = r.dst
                          AND d.tenant_id = s.tenant_id) THEN
            status := 'not_found';
            message := format('no instance %s', r.dst);
            RETURN NEXT;
            CONTINUE;
        END IF;
        BEGIN
            status := cairn.send_signal(r.dst, r.nm, r.pl::jsonb,
                                        'cairn:' || r.i || '/' || r.e || '/' || r.a, false,
                                        'instance ' || r.i);
        EXCEPTION
            WHEN no_data_found THEN
                status := 'not_found';
                message := SQLERRM;
            WHEN object_not_in_prerequisite_state THEN
                status := 'ended';
                message := SQLERRM;
            WHEN invalid_parameter_value THEN
                status := 'unknown_name';
                message := SQLERRM;
            WHEN program_limit_exceeded OR data_exception THEN
                -- over a limit (size, depth, unconsumed signals) or a number out of range: a
                -- refusal of this send, never an error that fails the whole write again and again
                status := 'limit';
                message := SQLERRM;
        END;
        IF message IS NULL THEN
            INSERT INTO cairn.runner_actions_done (instance_id, execution_id, attempt, status,
                                                   result)
            VALUES (r.i, r.e, r.a, 'json', convert_to(to_jsonb(status)::text, 'UTF8'));
        ELSE
            message := regexp_replace(message, '^cairn\.signal: ', '');
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
