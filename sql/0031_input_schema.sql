-- SPDX-License-Identifier: MIT
-- 0031: typed inputs. A version keeps the JSON Schema of its inputs (`cairnctl register` takes it
-- from the compiled graph; NULL: none is typed), which cairn.enqueue checks inputs against
-- (sql/api/20_instances.sql); register_version takes it (a new argument: the old signature
-- goes).
ALTER TABLE cairn.workflow_versions ADD COLUMN input_schema jsonb;
DROP FUNCTION IF EXISTS cairn.register_version(text, text, bytea, text, bigint, text[], text[]);
