-- SPDX-License-Identifier: MIT
-- 0033: which claimers wait for an enqueue notification. A NOTIFY takes a lock at commit that
-- makes notifying transactions commit one at a time, fsync included: eight sessions enqueueing
-- at once enqueued fewer instances a second than one (bench/enqueue). A claimer now says here
-- until when it waits (its row, by the claim session's own id), and cairn.enqueue and
-- cairn.enqueue_many notify only while one does (cairn.wake_claimers); a busy claimer claims
-- again without waiting and needs no wake-up. Rows of claimers that went away expire; the next
-- announcement clears those an hour old. cairn.check_value returns a value now (for callers on
-- the enqueue path that assign it rather than PERFORM it, which starts an executor): the old
-- signature goes.
CREATE TABLE cairn.claim_waits (
    claimer uuid PRIMARY KEY,
    until timestamptz NOT NULL
);
DROP FUNCTION IF EXISTS cairn.check_value(text, text, jsonb, integer, integer);
