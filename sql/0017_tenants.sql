-- SPDX-License-Identifier: MIT
-- 0017: tenants (docs/operations.md "Tenants").
--
-- Every workflow version, instance, schedule, backfill, limit and retention belongs to a
-- tenant; `default` unless said otherwise, so single-tenant use does not change. Names are
-- unique per tenant: two tenants may each have a workflow `billing`.
--
-- A tenant T is a PostgreSQL role, cairn_tenant_T (NOLOGIN, member of the group cairn_tenant).
-- An application login granted that role acts as the tenant with `SET ROLE cairn_tenant_T`
-- (cairnctl --tenant, CAIRN_TENANT, the Python client's tenant=). SET ROLE needs membership,
-- so hand-written SQL cannot act as another tenant; a session setting such as
-- `SET cairn.tenant = 'T'` could be set by anyone to anything, so it could not isolate.
-- Row-level security does the isolation, in the database, for every statement:
--   * members of cairn_tenant see and write only the rows of the tenant they act as; one that
--     has not SET ROLE to a tenant acts as none and sees nothing;
--   * members of cairn_app (0016) act as the tenant `default`, as before;
--   * cairn_runner sees every tenant (runners run every tenant's instances);
--   * the owner, who runs migrations, bypasses row security (it is not FORCEd): as before, it
--     sees every tenant, and what it creates by name lands in `default`.
-- The SQL API's functions run with the caller's rights, so the policies hold inside them too;
-- those the runners call (children, schedules, backfills, limits, retention) look names up in
-- the tenant of the row they work for.
--
-- queued_instances, runner_actions_done and instance_history are visible to an application
-- when their instance is. The queue also carries its instance's tenant (set by the trigger
-- that marks limits, which reads the instance anyway) for the runners' fair claim across
-- tenants (runner/backend_pg.c).

CREATE TABLE cairn.tenants (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,47}$'),
    max_running integer CHECK (max_running > 0),   -- a quota on running instances; NULL: none
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
INSERT INTO cairn.tenants (name) VALUES ('default');

-- Roles belong to the cluster, not to one database: tolerate another database's migration
-- having made them.
DO $$
BEGIN
    BEGIN
        CREATE ROLE cairn_tenant NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
    END;
    BEGIN
        CREATE ROLE cairn_tenant_default NOLOGIN IN ROLE cairn_tenant;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        GRANT cairn_tenant TO cairn_tenant_default;
    END;
END
$$;

-- The tenant the role in use acts as (cairn_tenant_T: T), NULL for any other role.
CREATE FUNCTION cairn.acting_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_user::text LIKE 'cairn\_tenant\_%'
                THEN substr(current_user::text, 14) END
$$;

-- The tenant a statement works for: the one acted as, else `default` (the owner, the runners,
-- cairn_app's members). What names are looked up in and new rows get.
CREATE FUNCTION cairn.current_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT coalesce(cairn.acting_tenant(), 'default')
$$;

-- Makes a tenant and its role (run by the owner, or any role that may create roles and
-- administers cairn_tenant). Returns the role's name, to grant to the tenant's logins.
CREATE FUNCTION cairn.tenant_create(p_name text, p_max_running integer DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_role text := 'cairn_tenant_' || p_name;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[a-z][a-z0-9_]{0,47}$' THEN
        RAISE EXCEPTION 'cairn.tenant_create: "%" is not a tenant name', p_name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'a-z, 0-9 and _, from a letter, at most 48 characters.';
    END IF;
    IF p_max_running < 1 THEN
        RAISE EXCEPTION 'cairn.tenant_create: a quota must be at least 1 (got %)',
            p_max_running USING ERRCODE = 'invalid_parameter_value';
    END IF;
    BEGIN
        INSERT INTO cairn.tenants (name, max_running) VALUES (p_name, p_max_running);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'cairn.tenant_create: tenant "%" exists', p_name
            USING ERRCODE = 'duplicate_object';
    END;
    BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN IN ROLE cairn_tenant', v_role);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
        EXECUTE format('GRANT cairn_tenant TO %I', v_role); -- made by another database
    END;
    RETURN v_role;
END
$$;

-- Existing rows are the default tenant's (a constant default: no table rewrite); new ones
-- take the tenant of the statement. The queue's is set by its trigger (below).
ALTER TABLE cairn.workflow_versions
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.runner_instances ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE cairn.schedules
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.backfills
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.workflow_limits
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.workflow_retention
    ADD COLUMN tenant_id text NOT NULL DEFAULT 'default' REFERENCES cairn.tenants (name);
ALTER TABLE cairn.queued_instances ADD COLUMN tenant_id text NOT NULL DEFAULT 'default';
ALTER TABLE cairn.workflow_versions ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.runner_instances ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.schedules ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.backfills ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.workflow_limits ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();
ALTER TABLE cairn.workflow_retention ALTER COLUMN tenant_id SET DEFAULT cairn.current_tenant();

-- Names are unique per tenant. No index of a table that row security filters starts with the
-- tenant: the policies add `tenant_id = <the tenant>` to an application's every statement, and
-- while a new tenant's rows are not analyzed yet the planner takes that condition for a
-- selective one and walks an index on the tenant rather than the primary key. A first version,
-- with the idempotency key's index led by the tenant, made each enqueue of a fresh tenant scan
-- all of the tenant's instances: 4 000 enqueues took 2.2 s where 2 000 had taken 0.38 s.
ALTER TABLE cairn.workflow_versions
    DROP CONSTRAINT workflow_versions_workflow_name_workflow_version_key,
    ADD CONSTRAINT workflow_versions_name UNIQUE (workflow_name, workflow_version, tenant_id);
ALTER TABLE cairn.runner_instances
    DROP CONSTRAINT runner_instances_idempotency,
    ADD CONSTRAINT runner_instances_idempotency
        UNIQUE (workflow_name, idempotency_key, tenant_id);
ALTER TABLE cairn.schedules DROP CONSTRAINT schedules_pkey, ADD PRIMARY KEY (name, tenant_id);
ALTER TABLE cairn.workflow_limits DROP CONSTRAINT workflow_limits_pkey,
    ADD PRIMARY KEY (workflow_name, tenant_id);
ALTER TABLE cairn.workflow_retention DROP CONSTRAINT workflow_retention_pkey,
    ADD PRIMARY KEY (workflow_name, tenant_id);
DROP INDEX cairn.runner_instances_schedule_slot;
CREATE UNIQUE INDEX runner_instances_schedule_slot ON cairn.runner_instances
    (schedule_name, schedule_slot, tenant_id) WHERE schedule_name IS NOT NULL;
DROP INDEX cairn.workflow_versions_latest;
CREATE INDEX workflow_versions_latest ON cairn.workflow_versions
    (workflow_name, tenant_id, created_at DESC);

-- References between rows stay within a tenant, whoever writes them: an application could
-- otherwise point a row of its own at another tenant's workflow version (and have the runners
-- run it for it), backfill (and make up its partitions) or parent instance (and hand it a
-- made-up child outcome). Foreign keys are checked with the owner's rights, past row security,
-- so the version's and the backfill's carry the tenant (NOT VALID: rows from before hold one
-- tenant; new and changed rows are checked). The parent's is a trigger, run only for rows with
-- a parent: a foreign key to (instance_id, tenant_id) needs a unique index of its own on the
-- hottest table, which cost queue-noop 13% and 8% more WAL per instance (measured, 3 runs each,
-- interleaved), and pruning a parent before its children would have had to change them.
ALTER TABLE cairn.workflow_versions ADD CONSTRAINT workflow_versions_id_tenant
    UNIQUE (id, tenant_id);
ALTER TABLE cairn.backfills ADD CONSTRAINT backfills_id_tenant UNIQUE (id, tenant_id);
ALTER TABLE cairn.runner_instances
    DROP CONSTRAINT runner_instances_workflow_version_id_fkey,
    ADD CONSTRAINT runner_instances_version_tenant FOREIGN KEY (workflow_version_id, tenant_id)
        REFERENCES cairn.workflow_versions (id, tenant_id) NOT VALID,
    ADD CONSTRAINT runner_instances_backfill_tenant FOREIGN KEY (backfill_id, tenant_id)
        REFERENCES cairn.backfills (id, tenant_id) NOT VALID;

-- Runs with the writer's rights: under row security an application sees no parent of another
-- tenant, and a runner (which sees all) finds it of another tenant.
CREATE FUNCTION cairn.parent_tenant() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.runner_instances p
                    WHERE p.instance_id = NEW.parent_id AND p.tenant_id = NEW.tenant_id) THEN
        RAISE EXCEPTION 'cairn: parent % of instance % is no instance of tenant %',
            NEW.parent_id, NEW.instance_id, NEW.tenant_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runner_instances_parent_tenant
    BEFORE INSERT OR UPDATE OF parent_id, tenant_id ON cairn.runner_instances
    FOR EACH ROW WHEN (NEW.parent_id IS NOT NULL) EXECUTE FUNCTION cairn.parent_tenant();

-- The claim's index leads with the tenant: the runners' claim walks it per tenant when there
-- are several (runner/backend_pg.c), and for the tenant `default` alone otherwise, in the same
-- order as before. Replaced rather than added to: one index more on the hottest table would
-- cost every enqueue and every claim.
DROP INDEX cairn.queued_instances_ready;
CREATE INDEX queued_instances_ready ON cairn.queued_instances
    (tenant_id, priority DESC, scheduled_at)
    WHERE lock_uuid IS NULL AND (limit_name IS NULL OR holds_slot);
DROP INDEX cairn.queued_instances_waiting;
CREATE INDEX queued_instances_waiting ON cairn.queued_instances
    (tenant_id, limit_name, limit_key, priority DESC, scheduled_at)
    WHERE limit_name IS NOT NULL AND NOT holds_slot;
-- Also what a tenant's quota counts (tenant_id alone).
DROP INDEX cairn.queued_instances_slots;
CREATE INDEX queued_instances_slots ON cairn.queued_instances (tenant_id, limit_name, limit_key)
    WHERE holds_slot;

-- The functions below are those of earlier migrations that look names up, with the tenant
-- added to each lookup and each new row; nothing else in them changed.

-- 0012's cairn.enqueue, in the caller's tenant.
CREATE OR REPLACE FUNCTION cairn.enqueue(
    workflow_name text,
    input jsonb DEFAULT '{}',
    idempotency_key text DEFAULT NULL,
    priority integer DEFAULT 0,
    scheduled_at timestamptz DEFAULT NULL,
    workflow_version text DEFAULT NULL,
    timeout interval DEFAULT NULL,
    concurrency_key text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_version_id uuid;
    v_version_timeout bigint;
    v_timeout_ms bigint;
    v_due timestamptz;
    v_id uuid;
    v_lim record;
    v_len integer;
    v_num numeric;
    v_tenant text := cairn.current_tenant();
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
    IF enqueue.concurrency_key = '' THEN
        RAISE EXCEPTION 'cairn.enqueue: the concurrency key is empty'
            USING ERRCODE = 'invalid_parameter_value', HINT = 'Use NULL for no key.';
    END IF;
    IF octet_length(enqueue.concurrency_key) > v_lim.idempotency_key_bytes THEN
        RAISE EXCEPTION 'cairn.enqueue: the concurrency key is % bytes, over the limit of % bytes',
            octet_length(enqueue.concurrency_key), v_lim.idempotency_key_bytes
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF NOT isfinite(enqueue.scheduled_at) THEN
        RAISE EXCEPTION 'cairn.enqueue: scheduled_at must be a finite time, got %',
            enqueue.scheduled_at
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL means now.';
    END IF;
    IF enqueue.timeout IS NOT NULL THEN
        v_timeout_ms := floor(extract(epoch FROM enqueue.timeout) * 1000);
        IF v_timeout_ms <= 0 OR v_timeout_ms > cairn.max_timeout_ms() THEN
            RAISE EXCEPTION 'cairn.enqueue: timeout must be positive and at most 366 days, got %',
                enqueue.timeout
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'NULL means the workflow''s own [timeout: D], if it has one.';
        END IF;
    END IF;
    SELECT v.id, v.timeout_ms INTO v_version_id, v_version_timeout
      FROM cairn.workflow_versions v
     WHERE v.tenant_id = v_tenant AND v.workflow_name = enqueue.workflow_name
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
    v_timeout_ms := coalesce(v_timeout_ms, v_version_timeout);
    v_due := coalesce(enqueue.scheduled_at, clock_timestamp());
    INSERT INTO cairn.runner_instances AS ri
           (tenant_id, workflow_version_id, workflow_name, input, idempotency_key, priority,
            timeout_ms, deadline_at, concurrency_key)
    VALUES (v_tenant, v_version_id, enqueue.workflow_name, enqueue.input, enqueue.idempotency_key,
            coalesce(enqueue.priority, 0), v_timeout_ms,
            v_due + v_timeout_ms * interval '1 millisecond', enqueue.concurrency_key)
    ON CONFLICT ON CONSTRAINT runner_instances_idempotency DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        SELECT ri.instance_id INTO v_id
          FROM cairn.runner_instances ri
         WHERE ri.tenant_id = v_tenant AND ri.workflow_name = enqueue.workflow_name
           AND ri.idempotency_key = enqueue.idempotency_key;
        RETURN v_id;
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, coalesce(enqueue.priority, 0), v_due);
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END;
$$;

-- 0010's cairn.start_children: a child is of its parent's tenant, and so is its workflow.
CREATE OR REPLACE FUNCTION cairn.start_children(
    p_parent uuid[], p_lock uuid[], p_child uuid[], p_exec uuid[], p_attempt integer[],
    p_workflow text[], p_version text[], p_input text[], p_timeout_ms bigint[],
    p_detached boolean[], p_max_depth integer)
RETURNS TABLE (child_id uuid, status text, message text)
LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    par record;
    v record;
    v_par_key text;   -- the parent (and lock) par holds; NULL: none looked up
    v_par_ok boolean;
    v_wf_key text;    -- the workflow (and version) v holds
    v_wf_ok boolean;
    v_sorted text[];  -- v.inputs, sorted
    v_input jsonb;
    v_keys text[];
    v_unknown text[];
    v_missing text[];
    v_timeout bigint;
    n_created integer := 0;
BEGIN
    -- A fan-out starts its children in one call, all of one parent and one workflow: the parent
    -- and the version are looked up once, not per child.
    FOR i IN 1 .. coalesce(array_length(p_child, 1), 0) LOOP
        child_id := p_child[i];
        message := NULL;
        IF v_par_key IS DISTINCT FROM p_parent[i]::text || p_lock[i]::text THEN
            v_par_key := p_parent[i]::text || p_lock[i]::text;
            SELECT ri.instance_id, ri.depth, coalesce(ri.root_id, ri.instance_id) AS root,
                   ri.priority, ri.tenant_id
              INTO par
              FROM cairn.queued_instances q
              JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
             WHERE q.instance_id = p_parent[i] AND q.lock_uuid = p_lock[i];
            v_par_ok := FOUND;
        END IF;
        CONTINUE WHEN NOT v_par_ok; -- the parent's lease is gone: its write is lost
        PERFORM 1 FROM cairn.runner_instances ri WHERE ri.instance_id = p_child[i];
        IF FOUND THEN
            status := 'exists';
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF par.depth + 1 > p_max_depth THEN
            status := 'too_deep';
            message := format('a child of this instance would be at depth %s, past the limit '
                              'of %s (CAIRN_MAX_CHILD_DEPTH)', par.depth + 1, p_max_depth);
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_wf_key IS DISTINCT FROM par.tenant_id || '/' || p_workflow[i] || '/'
                                     || coalesce(p_version[i], '') THEN
            v_wf_key := par.tenant_id || '/' || p_workflow[i] || '/' || coalesce(p_version[i], '');
            SELECT wv.id, wv.timeout_ms, wv.inputs INTO v
              FROM cairn.workflow_versions wv
             WHERE wv.tenant_id = par.tenant_id AND wv.workflow_name = p_workflow[i]
               AND (p_version[i] IS NULL OR wv.workflow_version = p_version[i])
             ORDER BY wv.created_at DESC
             LIMIT 1;
            v_wf_ok := FOUND;
            IF v_wf_ok AND v.inputs IS NOT NULL THEN
                SELECT coalesce(array_agg(n ORDER BY n), '{}') INTO v_sorted
                  FROM unnest(v.inputs) AS n;
            END IF;
        END IF;
        IF NOT v_wf_ok THEN
            status := 'not_found';
            message := CASE WHEN p_version[i] IS NULL
                            THEN format('no workflow "%s" is registered', p_workflow[i])
                            ELSE format('workflow "%s" has no version "%s"', p_workflow[i],
                                        p_version[i]) END;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_input := p_input[i]::jsonb;
        IF v.inputs IS NOT NULL THEN
            SELECT coalesce(array_agg(k ORDER BY k), '{}') INTO v_keys
              FROM jsonb_object_keys(v_input) AS k;
            IF v_keys IS DISTINCT FROM v_sorted THEN
                SELECT array_agg(k ORDER BY k) INTO v_unknown
                  FROM unnest(v_keys) AS k WHERE k <> ALL (v.inputs);
                SELECT array_agg(n ORDER BY o) INTO v_missing
                  FROM unnest(v.inputs) WITH ORDINALITY AS u(n, o) WHERE NOT v_input ? n;
                status := 'bad_input';
                message := format('%s takes inputs (%s)%s%s', p_workflow[i],
                                  array_to_string(v.inputs, ', '),
                                  CASE WHEN v_missing IS NULL THEN ''
                                       ELSE '; missing: ' || array_to_string(v_missing, ', ')
                                       END,
                                  CASE WHEN v_unknown IS NULL THEN ''
                                       ELSE '; unknown: ' || array_to_string(v_unknown, ', ')
                                       END);
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        -- The call's [timeout: D] is the child's deadline, unless its own is sooner.
        v_timeout := CASE WHEN p_timeout_ms[i] > 0
                          THEN least(p_timeout_ms[i], coalesce(v.timeout_ms, p_timeout_ms[i]))
                          ELSE v.timeout_ms END;
        INSERT INTO cairn.runner_instances
               (tenant_id, instance_id, workflow_version_id, workflow_name, input, priority,
                timeout_ms, deadline_at, parent_id, root_id, parent_exec_id, parent_attempt,
                depth, detached)
        VALUES (par.tenant_id, p_child[i], v.id, p_workflow[i], v_input, par.priority, v_timeout,
                clock_timestamp() + v_timeout * interval '1 millisecond', par.instance_id,
                par.root, p_exec[i], p_attempt[i], par.depth + 1, p_detached[i]);
        INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority,
                                            scheduled_at)
        VALUES (p_child[i], v.id, par.priority, clock_timestamp());
        n_created := n_created + 1;
        status := 'created';
        RETURN NEXT;
    END LOOP;
    IF n_created > 0 THEN
        PERFORM pg_notify('cairn_enqueue', '');
    END IF;
END
$$;

-- 0011's cairn.schedule_add, in the caller's tenant.
CREATE OR REPLACE FUNCTION cairn.schedule_add(
    p_name text, p_workflow text, p_cron text DEFAULT NULL, p_every interval DEFAULT NULL,
    p_timezone text DEFAULT 'UTC', p_input jsonb DEFAULT '{}', p_jitter interval DEFAULT NULL,
    p_catch_up text DEFAULT 'skip', p_paused boolean DEFAULT false,
    p_workflow_version text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    IF (p_cron IS NULL) = (p_every IS NULL) THEN
        RAISE EXCEPTION 'cairn.schedule_add: give a cron expression or an interval, not both'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM 1 FROM cairn.workflow_versions v
      WHERE v.tenant_id = cairn.current_tenant() AND v.workflow_name = p_workflow
        AND (p_workflow_version IS NULL OR v.workflow_version = p_workflow_version);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cairn.schedule_add: unknown workflow "%"%', p_workflow,
            CASE WHEN p_workflow_version IS NULL THEN ' (register it first)'
                 ELSE format(' version "%s"', p_workflow_version) END
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM now() AT TIME ZONE p_timezone; -- an unknown zone raises 22023 here
    INSERT INTO cairn.schedules (tenant_id, name, workflow_name, workflow_version, cron, every_ms,
                                 timezone, input, jitter_ms, catch_up, paused)
    VALUES (cairn.current_tenant(), p_name, p_workflow, p_workflow_version, p_cron,
            floor(extract(epoch FROM p_every) * 1000), p_timezone, coalesce(p_input, '{}'),
            coalesce(floor(extract(epoch FROM p_jitter) * 1000), 0), p_catch_up, p_paused);
    RETURN p_name;
END
$$;

-- 0011's schedule functions take the tenant: the caller's, or (cairn.schedule_fire, from the
-- runners) the schedule's. The old three-argument schedule_fire is dropped: beside the new one,
-- three-argument calls would be ambiguous.
DROP FUNCTION cairn.schedule_fire(text, timestamptz, timestamptz);
CREATE FUNCTION cairn.schedule_fire(p_name text, p_slot timestamptz, p_due timestamptz,
                                    p_tenant text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    s cairn.schedules%ROWTYPE;
    v_version_id uuid;
    v_timeout bigint;
    v_id uuid;
    v_tenant text := coalesce(p_tenant, cairn.current_tenant());
BEGIN
    SELECT * INTO s FROM cairn.schedules WHERE tenant_id = v_tenant AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no schedule "%"', p_name USING ERRCODE = 'no_data_found';
    END IF;
    SELECT v.id, v.timeout_ms INTO v_version_id, v_timeout
      FROM cairn.workflow_versions v
     WHERE v.tenant_id = v_tenant AND v.workflow_name = s.workflow_name
       AND (s.workflow_version IS NULL OR v.workflow_version = s.workflow_version)
     ORDER BY v.created_at DESC LIMIT 1;
    IF v_version_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%": workflow "%" is not registered', p_name, s.workflow_name
            USING ERRCODE = 'undefined_object';
    END IF;
    INSERT INTO cairn.runner_instances AS ri
           (tenant_id, workflow_version_id, workflow_name, input, timeout_ms, deadline_at,
            schedule_name, schedule_slot)
    VALUES (v_tenant, v_version_id, s.workflow_name, s.input, v_timeout,
            coalesce(p_due, clock_timestamp()) + v_timeout * interval '1 millisecond', p_name,
            p_slot)
    ON CONFLICT (schedule_name, schedule_slot, tenant_id) WHERE schedule_name IS NOT NULL
    DO NOTHING
    RETURNING ri.instance_id INTO v_id;
    IF v_id IS NULL THEN
        RETURN NULL; -- this slot was enqueued before
    END IF;
    INSERT INTO cairn.queued_instances (instance_id, workflow_version_id, priority, scheduled_at)
    VALUES (v_id, v_version_id, 0, coalesce(p_due, clock_timestamp()));
    PERFORM pg_notify('cairn_enqueue', '');
    RETURN v_id;
END
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_pause(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    UPDATE cairn.schedules SET paused = true
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_resume(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    UPDATE cairn.schedules SET paused = false, error = NULL, next_at = NULL
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

CREATE OR REPLACE FUNCTION cairn.schedule_delete(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    DELETE FROM cairn.schedules
     WHERE tenant_id = cairn.current_tenant() AND name = p_name RETURNING true
$$;

-- 0015's cairn.backfill_create, in the caller's tenant.
CREATE OR REPLACE FUNCTION cairn.backfill_create(
    p_workflow text, p_param text, p_from text, p_to text, p_step text,
    p_input jsonb DEFAULT '{}', p_concurrency integer DEFAULT 1, p_version text DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_inputs text[];
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
    SELECT v.inputs INTO v_inputs FROM cairn.workflow_versions v
     WHERE v.tenant_id = cairn.current_tenant() AND v.workflow_name = p_workflow
       AND (p_version IS NULL OR v.workflow_version = p_version)
     ORDER BY v.created_at DESC LIMIT 1;
    IF NOT FOUND THEN
        IF p_version IS NULL THEN
            RAISE EXCEPTION 'cairn.backfill_create: unknown workflow "%" (register it first)',
                p_workflow USING ERRCODE = 'undefined_object';
        END IF;
        RAISE EXCEPTION 'cairn.backfill_create: workflow "%" has no version "%"', p_workflow,
            p_version USING ERRCODE = 'undefined_object';
    END IF;
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
    IF v_inputs IS NOT NULL THEN
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

-- 0015's cairn.backfill_tick: a partition is of its backfill's tenant.
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

-- Limits are per (tenant, workflow), and a tenant's quota limits every workflow of the tenant:
-- its queue rows are limited (limit_name set) and cairn.claim_limited admits them only while
-- the tenant holds fewer slots than its quota. The advisory lock of 0012 is per tenant and
-- workflow.
DROP FUNCTION cairn.limit_lock_key(text);
CREATE FUNCTION cairn.limit_lock_key(p_tenant text, p_workflow text) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT hashtext(p_tenant || '/' || p_workflow) $$;

CREATE OR REPLACE FUNCTION cairn.queue_limit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_wf text;
    v_key text;
    v_tenant text;
    v_version uuid;
BEGIN
    SELECT ri.workflow_name, ri.concurrency_key, ri.tenant_id, ri.workflow_version_id
      INTO v_wf, v_key, v_tenant, v_version
      FROM cairn.runner_instances ri WHERE ri.instance_id = NEW.instance_id;
    NEW.limit_name := NULL;
    NEW.limit_key := NULL;
    NEW.holds_slot := false;
    IF v_wf IS NULL THEN
        RETURN NEW;
    END IF;
    NEW.tenant_id := v_tenant;
    NEW.workflow_version_id := v_version; -- whatever the writer said: the instance's is checked
    PERFORM pg_advisory_xact_lock_shared(1667330681, cairn.limit_lock_key(v_tenant, v_wf));
    IF v_key IS NOT NULL
       OR EXISTS (SELECT 1 FROM cairn.tenants t
                   WHERE t.name = v_tenant AND t.max_running IS NOT NULL) THEN
        -- a key is limited (max_per_key) even on a workflow nobody set a limit for, and so is
        -- every workflow of a tenant with a quota
        INSERT INTO cairn.workflow_limits (tenant_id, workflow_name) VALUES (v_tenant, v_wf)
        ON CONFLICT DO NOTHING;
    ELSIF NOT EXISTS (SELECT 1 FROM cairn.workflow_limits wl
                       WHERE wl.tenant_id = v_tenant AND wl.workflow_name = v_wf
                         AND wl.max_running IS NOT NULL) THEN
        RETURN NEW;
    END IF;
    NEW.limit_name := v_wf;
    NEW.limit_key := v_key;
    RETURN NEW;
END;
$$;

-- Re-marks the unfinished instances of a tenant's workflow after its limits or the tenant's
-- quota changed (the caller holds the workflow's advisory lock exclusively): started ones hold
-- a slot (so a limit set below the running count admits nothing new until enough finish),
-- queued ones wait. Returns how many it re-marked.
CREATE FUNCTION cairn.limit_mark(p_tenant text, p_workflow text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
    v_all boolean;
BEGIN
    -- Every instance is limited when the workflow has a running limit or its tenant a quota.
    SELECT EXISTS (SELECT 1 FROM cairn.workflow_limits wl
                    WHERE wl.tenant_id = p_tenant AND wl.workflow_name = p_workflow
                      AND wl.max_running IS NOT NULL)
        OR EXISTS (SELECT 1 FROM cairn.tenants t
                    WHERE t.name = p_tenant AND t.max_running IS NOT NULL)
      INTO v_all;
    -- The workflow's queue rows are locked first, in id order (as every writer locks them), and
    -- read again in a statement of their own: a claim or a write that changed one after this
    -- function's first snapshot is then seen as it is, not skipped (an UPDATE matched on a row
    -- version that has moved on leaves it alone), and whether an instance has started is read
    -- under the lock that every claim takes to start it.
    PERFORM 1 FROM cairn.queued_instances q
      JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
     WHERE ri.tenant_id = p_tenant AND ri.workflow_name = p_workflow
     ORDER BY q.instance_id
       FOR UPDATE OF q;
    WITH m AS (
        SELECT q.instance_id AS id, ri.concurrency_key AS k,
               (ri.concurrency_key IS NOT NULL OR v_all) AS limited,
               (q.lock_uuid IS NOT NULL OR ri.status <> 'queued') AS started
          FROM cairn.queued_instances q
          JOIN cairn.runner_instances ri ON ri.instance_id = q.instance_id
         WHERE ri.tenant_id = p_tenant AND ri.workflow_name = p_workflow)
    UPDATE cairn.queued_instances q
       SET limit_name = CASE WHEN m.limited THEN p_workflow END,
           limit_key = CASE WHEN m.limited THEN m.k END,
           holds_slot = m.limited AND m.started
      FROM m
     WHERE q.instance_id = m.id
       AND (q.limit_name, q.limit_key, q.holds_slot) IS DISTINCT FROM
           (CASE WHEN m.limited THEN p_workflow END, CASE WHEN m.limited THEN m.k END,
            m.limited AND m.started);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END;
$$;

-- 0012's cairn.limit_set, for a workflow of the caller's tenant.
CREATE OR REPLACE FUNCTION cairn.limit_set(p_workflow text, p_max_running integer,
                                           p_max_per_key integer DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_versions v
                    WHERE v.tenant_id = v_tenant AND v.workflow_name = p_workflow) THEN
        RAISE EXCEPTION 'cairn.limit_set: unknown workflow "%" (register it first)', p_workflow
            USING ERRCODE = 'undefined_object';
    END IF;
    IF p_max_running IS NOT NULL AND p_max_running < 1 OR p_max_per_key < 1 THEN
        RAISE EXCEPTION 'cairn.limit_set: limits must be at least 1 (got %, %)',
            p_max_running, p_max_per_key
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'NULL as the running limit removes it.';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(v_tenant, p_workflow));
    INSERT INTO cairn.workflow_limits AS wl (tenant_id, workflow_name, max_running, max_per_key)
    VALUES (v_tenant, p_workflow, p_max_running, coalesce(p_max_per_key, 1))
    ON CONFLICT (tenant_id, workflow_name) DO UPDATE
       SET max_running = EXCLUDED.max_running,
           max_per_key = coalesce(p_max_per_key, wl.max_per_key),
           updated_at = clock_timestamp();
    RETURN cairn.limit_mark(v_tenant, p_workflow);
END;
$$;

-- 0012's cairn.claim_limited, per (tenant, workflow), and under the tenants' quotas: a tenant's
-- row is locked (SKIP LOCKED) while a claim counts and takes its slots, so two runners never
-- both take the last one; a runner that finds it locked leaves the workflow to the other.
CREATE OR REPLACE FUNCTION cairn.claim_limited(p_max integer, p_lease_ms bigint)
RETURNS TABLE (l_instance_id uuid, l_lock uuid, l_version uuid)
LANGUAGE plpgsql AS $$
DECLARE
    l record;
    v_left integer := p_max;
    v_free bigint;
    v_keys text[];
    v_more text[];
    v_n integer;
    v_seen text[] := '{}';
BEGIN
    -- One limits row at a time: a FOR loop over a locking query fetches (and locks) ten rows
    -- at once, which other runners would then skip without this one using them.
    LOOP
        EXIT WHEN v_left <= 0;
        SELECT wl.tenant_id, wl.workflow_name, wl.max_running, wl.max_per_key, wl.key_cursor,
               (SELECT t.max_running FROM cairn.tenants t WHERE t.name = wl.tenant_id) AS quota
          INTO l
          FROM cairn.workflow_limits wl
         WHERE wl.tenant_id || '/' || wl.workflow_name <> ALL (v_seen)
           AND EXISTS (SELECT 1 FROM cairn.queued_instances q
                        WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
                          AND NOT q.holds_slot AND q.scheduled_at <= now())
         ORDER BY wl.claimed_at NULLS FIRST
         LIMIT 1
           FOR UPDATE OF wl SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        v_seen := v_seen || (l.tenant_id || '/' || l.workflow_name);
        v_free := v_left;
        IF l.max_running IS NOT NULL THEN
            SELECT least(v_free, l.max_running - count(*)) INTO v_free
              FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name AND q.holds_slot;
        END IF;
        IF l.quota IS NOT NULL THEN
            PERFORM 1 FROM cairn.tenants t WHERE t.name = l.tenant_id FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND; -- another runner is taking this tenant's slots
            -- a statement of its own: its snapshot sees the claims committed before the lock
            SELECT least(v_free, l.quota - count(*)) INTO v_free
              FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.holds_slot;
        END IF;
        CONTINUE WHEN v_free <= 0;
        -- The waiting keys, skipping from one to the next through the index.
        SELECT coalesce(array_agg(s.k), '{}') INTO v_keys FROM (
            WITH RECURSIVE ks(k) AS (
                (SELECT q.limit_key FROM cairn.queued_instances q
                  WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                    AND NOT q.holds_slot AND q.limit_key > coalesce(l.key_cursor, '')
                  ORDER BY q.limit_key LIMIT 1)
                UNION ALL
                SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                         WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                           AND NOT q.holds_slot AND q.limit_key > ks.k
                         ORDER BY q.limit_key LIMIT 1)
                  FROM ks WHERE ks.k IS NOT NULL)
            SELECT ks.k FROM ks WHERE ks.k IS NOT NULL LIMIT 1000) s;
        IF cardinality(v_keys) < 1000 AND l.key_cursor IS NOT NULL THEN
            -- wrap round to the keys before the cursor
            SELECT coalesce(array_agg(s.k), '{}') INTO v_more FROM (
                WITH RECURSIVE ks(k) AS (
                    (SELECT q.limit_key FROM cairn.queued_instances q
                      WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                        AND NOT q.holds_slot AND q.limit_key <= l.key_cursor
                      ORDER BY q.limit_key LIMIT 1)
                    UNION ALL
                    SELECT (SELECT q.limit_key FROM cairn.queued_instances q
                             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                               AND NOT q.holds_slot AND q.limit_key > ks.k
                               AND q.limit_key <= l.key_cursor
                             ORDER BY q.limit_key LIMIT 1)
                      FROM ks WHERE ks.k IS NOT NULL)
                SELECT ks.k FROM ks WHERE ks.k IS NOT NULL
                LIMIT 1000 - cardinality(v_keys)) s;
            v_keys := v_keys || v_more;
        END IF;
        RETURN QUERY
        WITH held AS (
            SELECT q.limit_key AS k, count(*) AS n FROM cairn.queued_instances q
             WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name AND q.holds_slot
               AND q.limit_key = ANY (v_keys)
             GROUP BY q.limit_key),
        cand AS (
            SELECT x.tid, x.priority, x.scheduled_at
              FROM unnest(v_keys) AS u(k)
              LEFT JOIN held h ON h.k = u.k
             CROSS JOIN LATERAL (
                   SELECT q.ctid AS tid, q.priority, q.scheduled_at
                     FROM cairn.queued_instances q
                    WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                      AND q.limit_key = u.k
                      AND NOT q.holds_slot AND q.lock_uuid IS NULL AND q.scheduled_at <= now()
                    ORDER BY q.priority DESC, q.scheduled_at
                    LIMIT greatest(l.max_per_key - coalesce(h.n, 0), 0)) x
            UNION ALL
            (SELECT q.ctid, q.priority, q.scheduled_at FROM cairn.queued_instances q
              WHERE q.tenant_id = l.tenant_id AND q.limit_name = l.workflow_name
                AND q.limit_key IS NULL
                AND NOT q.holds_slot AND q.lock_uuid IS NULL AND q.scheduled_at <= now()
              ORDER BY q.priority DESC, q.scheduled_at LIMIT v_free)),
        pick AS (SELECT c.tid FROM cand c ORDER BY c.priority DESC, c.scheduled_at LIMIT v_free),
        lk AS (SELECT q.ctid AS tid FROM cairn.queued_instances q, pick
                WHERE q.ctid = pick.tid FOR UPDATE OF q SKIP LOCKED)
        UPDATE cairn.queued_instances q
           SET lock_uuid = gen_random_uuid(), holds_slot = true, woken = false,
               lock_expires_at = clock_timestamp() + p_lease_ms * interval '1 millisecond'
          FROM lk WHERE q.ctid = lk.tid
        RETURNING q.instance_id, q.lock_uuid, q.workflow_version_id;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_left := v_left - v_n;
        UPDATE cairn.workflow_limits wl
           SET claimed_at = clock_timestamp(),
               key_cursor = CASE WHEN cardinality(v_keys) >= 1000 THEN v_keys[1000] END
         WHERE wl.tenant_id = l.tenant_id AND wl.workflow_name = l.workflow_name;
    END LOOP;
END;
$$;

-- 0012's view, per tenant; security_invoker, so that an application role sees only its own
-- tenant's rows through it (a view otherwise reads with its owner's rights).
DROP VIEW cairn.limit_status;
CREATE VIEW cairn.limit_status WITH (security_invoker = true) AS
SELECT wl.workflow_name, wl.max_running, wl.max_per_key,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
           AND q.holds_slot) AS running,
       (SELECT count(*) FROM cairn.queued_instances q
         WHERE q.tenant_id = wl.tenant_id AND q.limit_name = wl.workflow_name
           AND NOT q.holds_slot AND q.scheduled_at <= now()) AS waiting,
       wl.tenant_id
  FROM cairn.workflow_limits wl;
ALTER VIEW cairn.backfill_status SET (security_invoker = true);

-- 0012's cairn.limit_delete, for a workflow of the caller's tenant. Also refused while the
-- tenant has a quota and the workflow unfinished instances (they are limited by the quota).
CREATE OR REPLACE FUNCTION cairn.limit_delete(p_workflow text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_limits
                    WHERE tenant_id = v_tenant AND workflow_name = p_workflow) THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(v_tenant, p_workflow));
    IF EXISTS (SELECT 1 FROM cairn.queued_instances q
                WHERE q.tenant_id = v_tenant AND q.limit_name = p_workflow
                  AND q.limit_key IS NOT NULL) THEN
        RAISE EXCEPTION 'cairn.limit_delete: workflow "%" has unfinished instances with a '
            'concurrency key', p_workflow
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait until they finish, or keep the row (limit set W none).';
    END IF;
    PERFORM cairn.limit_set(p_workflow, NULL);
    IF EXISTS (SELECT 1 FROM cairn.queued_instances q
                WHERE q.tenant_id = v_tenant AND q.limit_name = p_workflow) THEN
        RAISE EXCEPTION 'cairn.limit_delete: workflow "%" has unfinished instances under its '
            'tenant''s quota', p_workflow
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Wait until they finish, or keep the row (limit set W none).';
    END IF;
    DELETE FROM cairn.workflow_limits WHERE tenant_id = v_tenant AND workflow_name = p_workflow;
    RETURN true;
END;
$$;

-- Sets a tenant's quota on running instances (NULL: none), and re-marks each of its
-- workflows' unfinished instances under that workflow's advisory lock, as cairn.limit_set
-- does: a quota set while the tenant's instances are being enqueued misses none. Returns
-- whether the tenant exists. The owner's: applications cannot change the tenants table.
CREATE FUNCTION cairn.tenant_quota(p_name text, p_max_running integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    w record;
BEGIN
    IF p_max_running < 1 THEN
        RAISE EXCEPTION 'cairn.tenant_quota: a quota must be at least 1 (got %)', p_max_running
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL removes the quota.';
    END IF;
    PERFORM set_config('lock_timeout', '500ms', true);
    UPDATE cairn.tenants SET max_running = p_max_running WHERE name = p_name;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    FOR w IN SELECT DISTINCT v.workflow_name FROM cairn.workflow_versions v
              WHERE v.tenant_id = p_name ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(1667330681, cairn.limit_lock_key(p_name, w.workflow_name));
        IF p_max_running IS NOT NULL THEN
            INSERT INTO cairn.workflow_limits (tenant_id, workflow_name)
            VALUES (p_name, w.workflow_name) ON CONFLICT DO NOTHING;
        END IF;
        PERFORM cairn.limit_mark(p_name, w.workflow_name);
        IF p_max_running IS NULL THEN
            -- the rows the quota made, when nothing else needs them: while any row exists,
            -- every claim goes through cairn.claim_limited
            DELETE FROM cairn.workflow_limits wl
             WHERE wl.tenant_id = p_name AND wl.workflow_name = w.workflow_name
               AND wl.max_running IS NULL AND wl.max_per_key = 1
               AND NOT EXISTS (SELECT 1 FROM cairn.queued_instances q
                                WHERE q.tenant_id = p_name AND q.limit_name = w.workflow_name);
        END IF;
    END LOOP;
    RETURN true;
END;
$$;

-- Retention is per (tenant, workflow). cairn.prune_batch gains p_tenant (NULL: any tenant) and
-- p_exclude_own: leave out the instances whose tenant and workflow have their own retention
-- (what the runners' default retention must not touch; a list of names, p_exclude, would leave
-- out the workflows of that name in every tenant).
DROP FUNCTION cairn.prune_batch(timestamptz, text, text[], integer, timestamptz);
CREATE FUNCTION cairn.prune_batch(p_cutoff timestamptz, p_workflow text DEFAULT NULL,
                                  p_exclude text[] DEFAULT '{}', p_batch integer DEFAULT 500,
                                  p_before timestamptz DEFAULT NULL,
                                  p_tenant text DEFAULT NULL,
                                  p_exclude_own boolean DEFAULT false,
                                  OUT instances integer, OUT actions integer,
                                  OUT next_before timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_upto timestamptz := least(p_cutoff, coalesce(p_before, p_cutoff));
    v_cand uuid[];
    v_ids uuid[];
BEGIN
    IF p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'cairn.prune_batch: the batch must be in 1..100000, got %', p_batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- One index walk per finished status (runner_instances_status), merged in creation order;
    -- a workflow's own through runner_instances_workflow. No lock here: FOR UPDATE cannot sit
    -- under a UNION.
    IF p_workflow IS NOT NULL THEN
        SELECT array_agg(c.instance_id), min(c.created_at) INTO v_cand, next_before FROM (
            SELECT ri.instance_id, ri.created_at FROM cairn.runner_instances ri
             WHERE ri.workflow_name = p_workflow AND ri.created_at <= v_upto
               AND (p_tenant IS NULL OR ri.tenant_id = p_tenant)
               AND ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')
               AND ri.completed_at < p_cutoff AND NOT ri.parent_pending
               AND NOT cairn.prune_keeps(ri.instance_id)
             ORDER BY ri.created_at DESC LIMIT p_batch) c;
    ELSE
        SELECT array_agg(c.instance_id), min(c.created_at) INTO v_cand, next_before FROM (
            SELECT u.instance_id, u.created_at FROM (
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'completed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'failed' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'cancelled' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)
                UNION ALL
                (SELECT ri.instance_id, ri.created_at, ri.workflow_name, ri.completed_at,
                        ri.parent_pending, ri.tenant_id FROM cairn.runner_instances ri
                  WHERE ri.status = 'timed_out' AND ri.created_at <= v_upto
                  ORDER BY ri.created_at DESC)) u
             WHERE u.completed_at < p_cutoff AND NOT u.parent_pending
               AND u.workflow_name <> ALL (p_exclude)
               AND (p_tenant IS NULL OR u.tenant_id = p_tenant)
               AND NOT (p_exclude_own
                        AND EXISTS (SELECT 1 FROM cairn.workflow_retention wr
                                     WHERE wr.tenant_id = u.tenant_id
                                       AND wr.workflow_name = u.workflow_name))
               AND NOT cairn.prune_keeps(u.instance_id)
             ORDER BY u.created_at DESC LIMIT p_batch) c;
    END IF;
    IF coalesce(cardinality(v_cand), 0) < p_batch THEN
        next_before := NULL; -- the walk reached the end
    END IF;
    -- Locked and checked again: a retry may have queued one again meanwhile.
    SELECT coalesce(array_agg(l.instance_id), '{}') INTO v_ids FROM (
        SELECT ri.instance_id FROM cairn.runner_instances ri
         WHERE ri.instance_id = ANY (coalesce(v_cand, '{}'))
           AND ri.status IN ('completed', 'failed', 'cancelled', 'timed_out')
           AND ri.completed_at < p_cutoff AND NOT ri.parent_pending
           AND NOT cairn.prune_keeps(ri.instance_id)
           FOR UPDATE SKIP LOCKED) l;
    DELETE FROM cairn.runner_actions_done d WHERE d.instance_id = ANY (v_ids);
    GET DIAGNOSTICS actions = ROW_COUNT;
    DELETE FROM cairn.runner_instances ri WHERE ri.instance_id = ANY (v_ids);
    GET DIAGNOSTICS instances = ROW_COUNT;
END;
$$;

-- 0013's cairn.prune_due, with each tenant's workflows' own retention.
CREATE OR REPLACE FUNCTION cairn.prune_due(p_default interval, p_batch integer DEFAULT 500,
                                           p_before timestamptz DEFAULT NULL,
                                           OUT instances integer, OUT actions integer,
                                           OUT next_before timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    w record;
    v_i integer;
    v_a integer;
BEGIN
    instances := 0;
    actions := 0;
    -- one runner prunes at a time; the others find nothing to do ("cair", 13)
    IF NOT pg_try_advisory_xact_lock(1667330681, 13) THEN
        RETURN;
    END IF;
    IF p_before IS NULL THEN -- a round's first batch: the workflows' own retention
        FOR w IN SELECT wr.tenant_id, wr.workflow_name, wr.keep FROM cairn.workflow_retention wr
                  WHERE wr.keep IS NOT NULL ORDER BY wr.tenant_id, wr.workflow_name LOOP
            EXIT WHEN instances >= p_batch;
            SELECT b.instances, b.actions INTO v_i, v_a
              FROM cairn.prune_batch(now() - w.keep, w.workflow_name, '{}', p_batch - instances,
                                     NULL, w.tenant_id) b;
            instances := instances + v_i;
            actions := actions + v_a;
        END LOOP;
        IF instances >= p_batch THEN
            RETURN; -- more of them next time; the rest's walk has not started
        END IF;
    END IF;
    IF p_default IS NOT NULL THEN
        SELECT b.instances, b.actions, b.next_before INTO v_i, v_a, next_before
          FROM cairn.prune_batch(now() - p_default, NULL, '{}', p_batch - instances,
                                 p_before, NULL, true) b;
        instances := instances + v_i;
        actions := actions + v_a;
    END IF;
END;
$$;

-- 0013's cairn.retention_set, for a workflow of the caller's tenant.
CREATE OR REPLACE FUNCTION cairn.retention_set(p_workflow text, p_keep interval,
                                               p_unset boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant text := cairn.current_tenant();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cairn.workflow_versions v
                    WHERE v.tenant_id = v_tenant AND v.workflow_name = p_workflow) THEN
        RAISE EXCEPTION 'cairn.retention_set: unknown workflow "%" (register it first)',
            p_workflow USING ERRCODE = 'undefined_object';
    END IF;
    IF p_keep <= interval '0' THEN
        RAISE EXCEPTION 'cairn.retention_set: retention must be positive, got %', p_keep
            USING ERRCODE = 'invalid_parameter_value', HINT = 'NULL keeps them for ever.';
    END IF;
    IF p_unset THEN
        DELETE FROM cairn.workflow_retention
         WHERE tenant_id = v_tenant AND workflow_name = p_workflow;
    ELSE
        INSERT INTO cairn.workflow_retention AS wr (tenant_id, workflow_name, keep)
        VALUES (v_tenant, p_workflow, p_keep)
        ON CONFLICT (tenant_id, workflow_name) DO UPDATE
           SET keep = EXCLUDED.keep, updated_at = clock_timestamp();
    END IF;
END;
$$;

-- cairn.cancel of 0010, notifying the instance id alone: anyone may LISTEN on a channel, and
-- a reason is the canceller's text (the runner reads it from the row, which it checks anyway:
-- anyone may NOTIFY too).
CREATE OR REPLACE FUNCTION cairn.cancel(p_instance_id uuid, p_reason text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    q cairn.queued_instances%ROWTYPE;
    st text;
    c record;
    reason text := left(coalesce(p_reason, 'cancelled'), 1000);
BEGIN
    FOR c IN
        SELECT ri.instance_id FROM cairn.runner_instances ri
         WHERE ri.parent_id = p_instance_id AND ri.status IN ('queued', 'running')
         ORDER BY ri.instance_id
    LOOP
        PERFORM cairn.cancel(c.instance_id, reason);
    END LOOP;
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
        -- waiting (see 0009).
        SELECT * INTO q FROM cairn.queued_instances WHERE instance_id = p_instance_id
            FOR UPDATE NOWAIT;
    END IF;
    IF q.instance_id IS NOT NULL AND q.lock_uuid IS NOT NULL
       AND q.lock_expires_at > clock_timestamp() THEN
        UPDATE cairn.runner_instances
           SET cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
               cancel_reason = reason
         WHERE instance_id = p_instance_id;
        PERFORM pg_notify('cairn_cancel', p_instance_id::text);
        RETURN 'requested';
    END IF;
    UPDATE cairn.runner_instances
       SET status = 'cancelled',
           error = jsonb_build_object('type', 'Cancelled', 'message', reason,
                                      'bases', jsonb_build_array('Exception'),
                                      'details', NULL),
           cancel_requested_at = coalesce(cancel_requested_at, clock_timestamp()),
           cancel_reason = reason,
           completed_at = clock_timestamp(),
           parent_pending = parent_id IS NOT NULL AND NOT detached
     WHERE instance_id = p_instance_id;
    DELETE FROM cairn.queued_instances WHERE instance_id = p_instance_id;
    RETURN 'cancelled';
END
$$;

-- Row security. Policies per role group; a role in none of them sees no row of these tables.
ALTER TABLE cairn.tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.runner_instances ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.schedules ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.backfills ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.workflow_retention ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.queued_instances ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.runner_actions_done ENABLE ROW LEVEL SECURITY;
ALTER TABLE cairn.instance_history ENABLE ROW LEVEL SECURITY;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['workflow_versions', 'runner_instances', 'schedules', 'backfills',
                             'workflow_limits', 'workflow_retention'] LOOP
        -- (SELECT ...): evaluated once per statement, not once per row
        EXECUTE format('CREATE POLICY acting_tenant ON cairn.%I TO cairn_tenant'
                       ' USING (tenant_id = (SELECT cairn.acting_tenant()))'
                       ' WITH CHECK (tenant_id = (SELECT cairn.acting_tenant()))', t);
        EXECUTE format('CREATE POLICY default_tenant ON cairn.%I TO cairn_app'
                       ' USING (tenant_id = ''default'') WITH CHECK (tenant_id = ''default'')',
                       t);
        EXECUTE format('CREATE POLICY every_tenant ON cairn.%I TO cairn_runner'
                       ' USING (true) WITH CHECK (true)', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['queued_instances', 'runner_actions_done', 'instance_history'] LOOP
        -- visible, and writable, when the instance is (whose own policies decide)
        EXECUTE format('CREATE POLICY instance_visible ON cairn.%I TO cairn_tenant, cairn_app'
                       ' USING (EXISTS (SELECT 1 FROM cairn.runner_instances ri'
                       '                 WHERE ri.instance_id = %I.instance_id))'
                       ' WITH CHECK (EXISTS (SELECT 1 FROM cairn.runner_instances ri'
                       '                      WHERE ri.instance_id = %I.instance_id))', t, t, t);
        EXECUTE format('CREATE POLICY every_tenant ON cairn.%I TO cairn_runner'
                       ' USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;
-- The queue's own tenant column is what the fair claim and the quotas count by: an application
-- may not write another tenant's name into a row of its own.
CREATE POLICY queue_tenant ON cairn.queued_instances AS RESTRICTIVE TO cairn_tenant, cairn_app
    USING (true) WITH CHECK (tenant_id = (SELECT cairn.current_tenant()));
CREATE POLICY acting_tenant ON cairn.tenants FOR SELECT TO cairn_tenant
    USING (name = (SELECT cairn.acting_tenant()));
CREATE POLICY default_tenant ON cairn.tenants FOR SELECT TO cairn_app
    USING (name = 'default');
CREATE POLICY every_tenant ON cairn.tenants TO cairn_runner USING (true) WITH CHECK (true);

-- cairn_tenant has cairn_app's rights (0016): rows, not shapes.
GRANT USAGE ON SCHEMA cairn TO cairn_tenant;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO cairn_tenant;
-- Sequences: USAGE (nextval) only, not SELECT: a sequence's last value counts every tenant's
-- rows.
GRANT USAGE ON ALL SEQUENCES IN SCHEMA cairn TO cairn_tenant;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cairn TO cairn_tenant;
REVOKE INSERT, UPDATE, DELETE ON cairn.schema_migrations FROM cairn_tenant;
REVOKE INSERT, UPDATE, DELETE ON cairn.runners FROM cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn GRANT USAGE ON SEQUENCES TO cairn_tenant;
ALTER DEFAULT PRIVILEGES IN SCHEMA cairn GRANT EXECUTE ON FUNCTIONS TO cairn_tenant;
-- What the claims go by is the runners' to write: an application's rights on the queue and
-- the limits rows are narrowed to the columns its functions write (a new queue row: enqueue,
-- retry, a schedule's trigger; re-marking after a limit change: cairn.limit_set), so that it
-- cannot fake an expired lease (which the claim takes first, across tenants) or move its
-- limits rows to the front of the claim's rotation. Row-level security already keeps each to
-- its own rows; this keeps the scheduling of everyone's rows honest.
REVOKE INSERT, UPDATE ON cairn.queued_instances FROM cairn_app, cairn_tenant;
GRANT INSERT (instance_id, workflow_version_id, priority, scheduled_at),
      UPDATE (limit_name, limit_key, holds_slot)
    ON cairn.queued_instances TO cairn_app, cairn_tenant;
REVOKE UPDATE ON cairn.workflow_limits FROM cairn_app, cairn_tenant;
GRANT UPDATE (max_running, max_per_key, updated_at) ON cairn.workflow_limits
    TO cairn_app, cairn_tenant;
-- Tenants and quotas are the owner's; a runner locks a tenant's row (UPDATE's right) while it
-- counts the tenant's slots.
REVOKE INSERT, UPDATE, DELETE ON cairn.tenants FROM cairn_app, cairn_tenant;
REVOKE INSERT, DELETE ON cairn.tenants FROM cairn_runner;
