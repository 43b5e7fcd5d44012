-- SPDX-License-Identifier: MIT
-- 0029: keyed events go with retention (sql/api/60_retention.sql cairn.prune_events: an event
-- older than every unfinished instance of its tenant can be taken by nobody), and the publish
-- answers its waits in set-based statements (sql/api/35_signals.sql) instead of one instance at
-- a time through cairn.take_event.
DROP FUNCTION IF EXISTS cairn.take_event(uuid, bigint, jsonb);
-- prune_due says how many events it deleted too: a new return type.
DROP FUNCTION IF EXISTS cairn.prune_due(interval, integer, timestamptz);
-- The pruner's walk: a tenant's events, oldest first.
CREATE INDEX events_age ON cairn.events (tenant_id, published_at);
