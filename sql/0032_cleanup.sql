-- SPDX-License-Identifier: MIT
-- 0032: cleanup on cancel and timeout. An instance whose finally blocks run after a cancel or a
-- workflow timeout stays `running` while they do: cleanup_until (written with the snapshot that
-- begins the cleanup) says so and until when, so that cairn.expire_overdue leaves it to the
-- runner that resumes it and `inspect` and the status page can show it. cancel_force marks a
-- cancel asked with p_force (cairnctl cancel --force), which skips or abandons the cleanup.
-- workflow_versions.cleanup says whether a version has finally blocks at all: a cancel of an
-- instance of one that no runner holds is then left to the next claim (which runs the cleanup)
-- instead of being ended in SQL. cairn.cancel takes p_force (a new argument: the old signature
-- goes), register_version p_cleanup.
ALTER TABLE cairn.runner_instances
    ADD COLUMN cleanup_until timestamptz,
    ADD COLUMN cancel_force boolean NOT NULL DEFAULT false;
ALTER TABLE cairn.workflow_versions ADD COLUMN cleanup boolean NOT NULL DEFAULT false;
DROP FUNCTION IF EXISTS cairn.cancel(uuid, text);
DROP FUNCTION IF EXISTS cairn.register_version(text, text, bytea, text, bigint, text[], text[],
                                               jsonb);
-- The instances cleaning up, for the status page: few at any time, so a small partial index.
CREATE INDEX runner_instances_cleaning ON cairn.runner_instances (cleanup_until)
    WHERE cleanup_until IS NOT NULL AND status IN ('queued', 'running');
