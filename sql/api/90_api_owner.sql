-- SPDX-License-Identifier: MIT
-- 90_api_owner.sql
--
-- The API's writing functions, those declared SECURITY DEFINER in the files before this one,
-- run as the NOLOGIN role cairn_api (docs/operations.md "Roles"): applications hold SELECT alone
-- on the tables and write through them. Each is owned by cairn_api, callable by the
-- application and runner groups, not by PUBLIC. Their search_path is fixed in their definitions
-- (pg_temp last), as for any SECURITY DEFINER function: a caller's temporary objects must not
-- stand in for ours. cairn_api may create in the schema only while it is handed the functions.
GRANT CREATE ON SCHEMA cairn TO cairn_api;
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'cairn'::regnamespace AND p.prosecdef LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO cairn_api', f);
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO cairn_app, cairn_tenant, cairn_runner',
                       f);
    END LOOP;
END
$$;
REVOKE CREATE ON SCHEMA cairn FROM cairn_api;
