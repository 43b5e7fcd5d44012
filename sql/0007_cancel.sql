-- SPDX-License-Identifier: MIT
-- Cancelling instances (docs/operations.md, "Cancelling instances").
--
-- A cancel of an instance nobody holds (queued, a sleep handed back, a lease expired) is done
-- here at once: status cancelled, the queue row gone, so no runner can claim it again and the
-- fenced writes of a runner that lost its lease find no row. An instance a live runner holds is
-- marked (cancel_requested_at, cancel_reason) and its runner told with NOTIFY cairn_cancel
-- (payload: the instance id, a space, the reason); the runner cancels its running attempts and
-- writes `cancelled` through its fenced write path. A runner that missed the notification sees
-- the mark when it sweeps (after each reconnect and every few seconds) or when it claims the
-- instance.

ALTER TABLE cairn.runner_instances
    ADD COLUMN cancel_requested_at timestamptz,
    ADD COLUMN cancel_reason text;

-- What the runners sweep: few rows, only those waiting for their runner to act.
CREATE INDEX runner_instances_cancel_requested ON cairn.runner_instances (instance_id)
    WHERE cancel_requested_at IS NOT NULL AND status IN ('queued', 'running');

-- Cancels one instance. Returns what happened:
--   'cancelled'  nobody held it: it is cancelled now;
--   'requested'  a runner holds it: that runner cancels it (normally within a second);
--   'completed', 'failed', 'cancelled' with a prefix 'already ': it had finished; nothing
--                changed (its result or error is kept).
-- Raises no_data_found (P0002) when there is no such instance.
CREATE FUNCTION cairn.cancel(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    q cairn.queued_instances%ROWTYPE;
    st text;
    reason text := left(coalesce(p_reason, 'cancelled'), 1000);
BEGIN
    -- The queue row first, then the instance row: the order the runner's fenced writes lock
    -- them in, so a cancel and a write never wait on each other in a cycle.
    SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id FOR UPDATE;
    SELECT status INTO st FROM cairn.runner_instances WHERE instance_id = p_instance_id
        FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no instance %', p_instance_id USING ERRCODE = 'no_data_found';
    END IF;
    IF st IN ('completed', 'failed', 'cancelled') THEN
        RETURN 'already ' || st;
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
