-- SPDX-License-Identifier: MIT
-- 0010: two fixes to 0009 (found by review).
--
-- cairn.expire_overdue bounds its walk by now() instead of clock_timestamp(): a stable bound is
-- an index condition on runner_instances_deadline, a volatile one a filter over every unfinished
-- instance that has a deadline (measured: 23 ms a call with 200 000 of them; every runner calls
-- it every 2 s). now() is the calling statement's start, a few milliseconds at most.
--
-- cairn.cancel re-checks the queue row when the instance turned out unfinished although it had
-- none at first: cairn.retry queued it again meanwhile. Waiting for that row (a claim may hold it
-- while it waits for the instance row this cancel holds) would deadlock; NOWAIT makes the race a
-- clear error (55P03, try again) instead, and a row nobody holds is cancelled as before.

CREATE OR REPLACE FUNCTION cairn.expire_overdue() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer := 0;
    r record;
BEGIN
    FOR r IN
        SELECT ri.instance_id, ri.timeout_ms
          FROM cairn.runner_instances ri
         WHERE ri.deadline_at < now() AND ri.status IN ('queued', 'running')
         ORDER BY ri.deadline_at
         LIMIT 1000
    LOOP
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
                   'bases', jsonb_build_array('TimeoutError', 'Exception'), 'details', NULL),
               completed_at = clock_timestamp()
         WHERE instance_id = r.instance_id AND status IN ('queued', 'running');
        DELETE FROM cairn.queued_instances WHERE instance_id = r.instance_id;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

CREATE OR REPLACE FUNCTION cairn.cancel(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    q cairn.queued_instances%ROWTYPE;
    st text;
    reason text := left(coalesce(p_reason, 'cancelled'), 1000);
BEGIN
    SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id FOR UPDATE;
    SELECT status INTO st FROM cairn.runner_instances WHERE instance_id = p_instance_id
        FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF st IN ('completed', 'failed', 'cancelled', 'timed_out') THEN
        RETURN 'already ' || st;
    END IF;
    IF q.instance_id IS NULL THEN
        -- Retried while this cancel waited for the instance row: its new queue row, without
        -- waiting (see the header).
        SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id
            FOR UPDATE NOWAIT;
    END IF;
    IF q.instance_id IS NOT NULL AND q.lock_uuid IS NOT NULL
       AND q.lock_expires_at > clock_timestamp() THEN
        UPDATE cairn.runner_instances
           SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
               cancel_reason = reason
         WHERE instance_id = p_instance_id;
        PERFORM pg_notify('cairn_cancel', p_instance_id::text || ' ' || reason);
        RETURN 'requested';
    END IF;
    UPDATE cairn.runner_instances
       SET status = 'cancelled',
           error = jsonb_build_object('type', 'Cancelled', 'message', reason,
                                      'bases', jsonb_build_array('Exception'),
                                      'details', NULL),
           cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
           cancel_reason = reason,
           completed_at = clock_timestamp()
     WHERE instance_id = p_instance_id;
    DELETE FROM cairn.queued_instances WHERE instance_id = p_instance_id;
    RETURN 'cancelled';
END
$$;
