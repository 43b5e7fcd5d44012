-- SPDX-License-Identifier: MIT
-- 0028: signal tokens (sql/api/37_signal_tokens.sql; docs/operations.md "Signal tokens"): a
-- secret that can send one signal name to one instance and address nothing else, for a webhook
-- whose caller knows neither the instance nor any other right. Only a digest of the token is
-- kept: a reader of the table (applications read every table they may see) learns nothing
-- that sends. Goes with its instance.
CREATE TABLE cairn.signal_tokens (
    digest bytea PRIMARY KEY, -- sha256 of the token's text
    instance_id uuid NOT NULL REFERENCES cairn.runner_instances (instance_id) ON DELETE CASCADE,
    name text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text NOT NULL,
    expires_at timestamptz -- NULL: while the instance lives
);
CREATE INDEX signal_tokens_instance ON cairn.signal_tokens (instance_id);
