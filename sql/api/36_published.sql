-- SPDX-License-Identifier: MIT
-- 36_published.sql
--
-- Values a workflow publishes (cairn.published, 0024; docs/semantics.md "Published values"):
-- the runner writes them in its fenced write (runner/store/pg/persist.c, cairn_publish), a
-- client reads them with cairn.get_value and may wait for the next one on the instance's
-- cairn.value_channel, which the write notifies when it commits.

-- One channel per instance, as cairn.done_channel: a client hears only what it waits for.
CREATE OR REPLACE FUNCTION cairn.value_channel(p_instance_id uuid) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 'cairn_value_' || replace(p_instance_id::text, '-', '')
$$;

CREATE OR REPLACE FUNCTION cairn.published_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(cairn.value_channel(NEW.instance_id), NEW.name);
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER published_notify AFTER INSERT OR UPDATE ON cairn.published
    FOR EACH ROW EXECUTE FUNCTION cairn.published_notify();

-- The value an instance published last under p_name: one row, whose value is NULL (and
-- version 0) while it has published none, with the instance's status, so that a reader knows
-- whether to wait for one. An instance the caller cannot see (unknown, another tenant's): P0002.
-- Runs as the caller: row security decides what it sees.
CREATE OR REPLACE FUNCTION cairn.get_value(p_instance_id uuid, p_name text)
RETURNS TABLE (value jsonb, version integer, published_at timestamptz, status text)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT ri.status INTO status FROM cairn.runner_instances ri
     WHERE ri.instance_id = p_instance_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.get_value: no instance %', p_instance_id
            USING ERRCODE = 'no_data_found',
                  HINT = 'cairnctl list shows the instances you can see.';
    END IF;
    SELECT p.value, p.version, p.published_at INTO value, version, published_at
      FROM cairn.published p WHERE p.instance_id = p_instance_id AND p.name = p_name;
    IF NOT FOUND THEN
        version := 0;
    END IF;
    RETURN NEXT;
END
$$;
