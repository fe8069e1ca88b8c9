-- pklimit_grants: a GRANT on pklimit's table succeeds, but the privileges
-- that would let a role other than its owner write it, lock it against
-- pklimit's writes or get around its row level security (INSERT, UPDATE,
-- DELETE, TRUNCATE, REFERENCES, TRIGGER, and MAINTAIN from PostgreSQL 17:
-- pklimit_grants_1.out) are left out, with a WARNING; every other table gets
-- the whole GRANT.  Nobody but the owner can LOCK the table.

CREATE ROLE regress_pklimit_app NOSUPERUSER NOBYPASSRLS;
CREATE TABLE public.regress_orders (id int);
CREATE FUNCTION pg_temp.privileges_of(role name, tab regclass) RETURNS text
LANGUAGE sql AS $$
  SELECT coalesce(string_agg(p, ', ' ORDER BY p), 'none')
    FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p
   WHERE has_table_privilege(role, tab, p)
$$;

-- what almost every set-up script runs
GRANT ALL ON ALL TABLES IN SCHEMA public TO regress_pklimit_app;
SELECT pg_temp.privileges_of('regress_pklimit_app', 'public.regress_orders') AS on_orders,
       pg_temp.privileges_of('regress_pklimit_app', 'platformkit_limits') AS on_pklimit;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM regress_pklimit_app;

-- and what admins run instead, or one privilege at a time
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO regress_pklimit_app;
GRANT ALL ON platformkit_limits TO regress_pklimit_app WITH GRANT OPTION;
GRANT TRUNCATE ON platformkit_limits TO regress_pklimit_app;
GRANT REFERENCES ON platformkit_limits TO regress_pklimit_app;
GRANT TRIGGER ON platformkit_limits TO regress_pklimit_app;
GRANT INSERT ON platformkit_limits TO PUBLIC;
GRANT UPDATE (count), REFERENCES (key) ON platformkit_limits TO regress_pklimit_app;
SELECT pg_temp.privileges_of('regress_pklimit_app', 'public.regress_orders') AS on_orders,
       pg_temp.privileges_of('regress_pklimit_app', 'platformkit_limits') AS on_pklimit,
       pg_temp.privileges_of('public', 'platformkit_limits') AS public_on_pklimit;
SELECT string_agg(DISTINCT privilege_type, ', ') AS column_privileges
  FROM information_schema.column_privileges
 WHERE table_name = 'platformkit_limits' AND grantee = 'regress_pklimit_app';
-- a GRANT of SELECT alone, and one on another table, go through silently
GRANT SELECT ON platformkit_limits TO regress_pklimit_app;
GRANT ALL ON public.regress_orders TO regress_pklimit_app;

-- a role with SELECT sees no row and cannot lock the table against writes
SET ROLE regress_pklimit_app;
SELECT count(*) FROM platformkit_limits;
BEGIN;
LOCK TABLE platformkit_limits IN EXCLUSIVE MODE;
ROLLBACK;
RESET ROLE;
-- nor can pg_write_all_data, which holds UPDATE and DELETE on every table;
-- its DELETE finds no row
SELECT pklimit_allow('grants-kept', 5, '36500 days');
CREATE ROLE regress_pklimit_writer NOSUPERUSER NOBYPASSRLS IN ROLE pg_write_all_data;
SET ROLE regress_pklimit_writer;
BEGIN;
LOCK TABLE platformkit_limits IN EXCLUSIVE MODE;
ROLLBACK;
BEGIN;
LOCK TABLE public.regress_orders IN EXCLUSIVE MODE;
ROLLBACK;
DELETE FROM platformkit_limits;
RESET ROLE;
SELECT pklimit_count('grants-kept');
SELECT pklimit_forget('grants-kept');
-- the owner can
BEGIN;
LOCK TABLE platformkit_limits IN EXCLUSIVE MODE;
ROLLBACK;

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM regress_pklimit_app;
REVOKE ALL ON platformkit_limits FROM PUBLIC;
DROP TABLE public.regress_orders;
DROP ROLE regress_pklimit_app;
DROP ROLE regress_pklimit_writer;
