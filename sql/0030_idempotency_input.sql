-- SPDX-License-Identifier: MIT
-- 0030: cairn.enqueue refuses an idempotency key used before with another input, unless the
-- caller asks for the first instance anyway (a new argument, first_if_input_differs: the old
-- signature goes; sql/api/20_instances.sql defines the new one).
DROP FUNCTION IF EXISTS cairn.enqueue(text, jsonb, text, integer, timestamptz, text, interval,
                                      text);
