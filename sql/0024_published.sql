-- SPDX-License-Identifier: MIT
-- 0024: values a workflow publishes (`publish stage = "charged"`), readable by any client while
-- the instance runs, waits or sleeps, and after it ends (sql/api/36_published.sql;
-- docs/semantics.md "Published values").
--
-- One row per instance and name: the latest value wins, written by the runner in the fenced
-- write of the step that published it, so a value is never newer than the progress recorded
-- with it. Goes with the instance (retention deletes both).
CREATE TABLE cairn.published (
    instance_id uuid NOT NULL REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    name text NOT NULL,
    value jsonb NOT NULL,
    version integer NOT NULL DEFAULT 1, -- how many times the instance published it
    published_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (instance_id, name)
);
