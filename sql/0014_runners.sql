-- SPDX-License-Identifier: MIT
-- 0014: the fleet table (docs/operations.md "Status page").
--
-- One row per live cairn-runner process, written by the runner itself: inserted when it starts,
-- refreshed every 5 s (seen_at and its pool's figures, one statement), deleted when it stops
-- gracefully. A runner that dies leaves its row behind: readers treat a row whose seen_at is
-- more than 60 s old as dead, and the next runner that publishes deletes it. Nothing else
-- depends on this table: losing it loses nothing but the view of the fleet.
--
-- actions is an object keyed by action name, one entry per action this runner's pool knows of
-- (served by a connected worker, or with attempts waiting):
--   {"billing.charge": {"workers": 0, "slots": 0, "busy": 0, "waiting": 12}, ...}
-- workers: connected workers that serve it; slots: their slots added up; busy: its attempts
-- running on them; waiting: its attempts submitted to this runner's pool and not dispatched yet
-- (waiting for a slot, or, when workers is 0, for any worker at all).
CREATE TABLE cairn.runners (
    runner_id uuid PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    http text,                       -- its HTTP address (status page, /metrics), or NULL
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at timestamptz NOT NULL DEFAULT now(),
    workers integer NOT NULL DEFAULT 0 CHECK (workers >= 0),
    slots integer NOT NULL DEFAULT 0 CHECK (slots >= 0),
    busy integer NOT NULL DEFAULT 0 CHECK (busy >= 0),
    actions jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(actions) = 'object')
);
