-- SPDX-License-Identifier: MIT
-- 37_signal_tokens.sql
--
-- Signal tokens (0028; docs/operations.md "Signal tokens"): cairn.signal_token mints a token
-- for one (instance, signal name); cairn.signal_by_token sends that signal with it, through
-- cairn.send_signal (35_signals.sql), so every check and answer of cairn.signal applies. The
-- token is the only thing a holder needs, and it can send nothing but that one signal to that
-- one instance: a payment provider's webhook carries it in its URL, and the application's
-- handler calls cairn.signal_by_token without looking anything up.
--
-- This file always holds the current definitions: change them here, not in a migration
-- (sql/README.md). Both functions are SECURITY DEFINER, owned by cairn_api (90_api_owner.sql):
-- row security is the caller's, so a token of another tenant's instance finds no instance.

-- The digest a token is kept under.
CREATE OR REPLACE FUNCTION cairn.signal_token_digest(p_token text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT sha256(convert_to(p_token, 'UTF8')) $$;

-- Mints a token that sends signal p_name to instance p_instance_id, valid for p_ttl (NULL: while
-- the instance lives). Returns the token: 'cst_' and 64 hex digits (two random UUIDs' 244
-- random bits). Refuses what cairn.signal would refuse at once: no such instance (P0002), one
-- that has ended (55000), a name its workflow never waits for (22023); and a ttl that is not
-- positive (22023).
CREATE OR REPLACE FUNCTION cairn.signal_token(p_instance_id uuid, p_name text,
                                              p_ttl interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    v_status text;
    v_workflow text;
    v_names text[];
    v_token text;
BEGIN
    IF p_ttl IS NOT NULL AND p_ttl <= interval '0' THEN
        RAISE EXCEPTION 'cairn.signal_token: the ttl must be positive, got %', p_ttl
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no expiry.';
    END IF;
    SELECT ri.status, ri.workflow_name, v.signals INTO v_status, v_workflow, v_names
      FROM cairn.runner_instances ri JOIN cairn.workflow_versions v ON v.id = ri.workflow_version_id
     WHERE ri.instance_id = p_instance_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.signal_token: no instance %', p_instance_id
            USING ERRCODE = 'no_data_found';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM cairn.queued_instances q WHERE q.instance_id = p_instance_id)
    THEN
        RAISE EXCEPTION 'cairn.signal_token: instance % has ended (%)', p_instance_id, v_status
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF p_name IS NULL OR NOT p_name = ANY (v_names) THEN
        RAISE EXCEPTION 'cairn.signal_token: workflow % never waits for signal "%"', v_workflow,
            coalesce(p_name, '')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = CASE WHEN cardinality(v_names) = 0
                              THEN 'It has no wait for a signal.'
                              ELSE 'Its waits take: ' || array_to_string(v_names, ', ') END;
    END IF;
    v_token := 'cst_' || replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
    INSERT INTO cairn.signal_tokens (digest, instance_id, name, created_by, expires_at)
    VALUES (cairn.signal_token_digest(v_token), p_instance_id, p_name, cairn.api_caller(),
            clock_timestamp() + p_ttl);
    RETURN v_token;
END
$$;

-- Sends the signal token p_token stands for, with p_payload and p_dedup_key, as cairn.signal
-- does (the same answers and refusals), recorded as sent by 'token' and the first 12 hex digits
-- of its digest. Refuses a token that is unknown, or expired, as no_data_found (P0002): one
-- message for both, so a guess learns nothing.
CREATE OR REPLACE FUNCTION cairn.signal_by_token(p_token text, p_payload jsonb DEFAULT 'null',
                                                 p_dedup_key text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, cairn, pg_temp
AS $$
DECLARE
    t record;
BEGIN
    SELECT st.instance_id, st.name, st.digest INTO t FROM cairn.signal_tokens st
     WHERE st.digest = cairn.signal_token_digest(p_token)
       AND (st.expires_at IS NULL OR st.expires_at > clock_timestamp());
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.signal_by_token: no such token, or it has expired'
            USING ERRCODE = 'no_data_found',
                  HINT = 'Tokens come from cairn.signal_token (cairnctl signal-token).';
    END IF;
    RETURN cairn.send_signal(t.instance_id, t.name, p_payload, p_dedup_key, false,
                             'token ' || left(encode(t.digest, 'hex'), 12));
END
$$;
