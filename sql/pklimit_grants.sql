-- pklimit_grants: a GRANT on pklimit's table succeeds, but the privileges
-- that would let a role other than its owner write it, lock it against
-- pklimit's writes or get around its row level security (INSERT, UPDATE,
-- DELETE, TRUNCATE, REFERENCES, TRIGGER, and MAINTAIN from PostgreSQL 17:
-- pklimit_grants_1.out) are left out, with a WARNING, and so is SELECT for
-- a role that row level security applies to (it would see no row, but learn
-- the stored keys through EXPLAIN ANALYZE); every other table gets the whole
-- GRANT.  Nobody but the owner can LOCK the table, directly or through a
-- view, or name it where PostgreSQL locks it before checking privileges.

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
-- SELECT alone, on the table or a column, is left out too, for roles and
-- PUBLIC; one on another table goes through silently
GRANT SELECT ON platformkit_limits TO regress_pklimit_app;
GRANT SELECT (key) ON platformkit_limits TO regress_pklimit_app, PUBLIC;
GRANT ALL ON public.regress_orders TO regress_pklimit_app;
SELECT pg_temp.privileges_of('regress_pklimit_app', 'platformkit_limits') AS on_pklimit,
       pg_temp.privileges_of('public', 'platformkit_limits') AS public_on_pklimit;

-- so a role given everything by the usual set-up script cannot find out
-- which keys are stored: the planner would check the key conditions in the
-- index before the policy, and EXPLAIN ANALYZE count the rows the policy
-- removed
SELECT pklimit_allow('login:alice@example.com', 5, '36500 days');
GRANT ALL ON ALL TABLES IN SCHEMA public TO regress_pklimit_app;
SET ROLE regress_pklimit_app;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT 1 FROM platformkit_limits WHERE key >= 'g:login:a' AND key < 'g:login:b';
SELECT count(*) FROM platformkit_limits;
-- nor lock the table against writes
BEGIN;
LOCK TABLE platformkit_limits IN EXCLUSIVE MODE;
ROLLBACK;
RESET ROLE;
-- a role that bypasses row level security may be granted SELECT, and reads
-- every row
CREATE ROLE regress_pklimit_auditor NOSUPERUSER BYPASSRLS;
GRANT SELECT ON platformkit_limits TO regress_pklimit_auditor;
SET ROLE regress_pklimit_auditor;
SELECT key, count FROM platformkit_limits WHERE key = 'g:login:alice@example.com';
RESET ROLE;
SELECT pklimit_forget('login:alice@example.com');
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
-- nor through views, whose LOCK locks the table with their owner's
-- privileges
CREATE TEMP VIEW regress_limits_view AS SELECT * FROM platformkit_limits;
CREATE TEMP VIEW regress_limits_view2 AS SELECT count(*) FROM regress_limits_view;
BEGIN;
LOCK regress_limits_view2 IN ACCESS EXCLUSIVE MODE;
ROLLBACK;
DROP VIEW regress_limits_view2, regress_limits_view;
RESET ROLE;
SELECT pklimit_count('grants-kept');
SELECT pklimit_forget('grants-kept');
-- nor name it in a statement that PostgreSQL would make wait for the
-- table's lock before finding the role may not run it: a lock waiting for
-- its turn behind any reader holds up every pklimit call
SET ROLE regress_pklimit_app;
CREATE RULE regress_nothing AS ON INSERT TO platformkit_limits DO INSTEAD NOTHING;
CREATE TRIGGER regress_trigger BEFORE INSERT ON platformkit_limits
  FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger();
CREATE TEMP TABLE regress_parent (key text) PARTITION BY LIST (key);
ALTER TABLE regress_parent ATTACH PARTITION platformkit_limits FOR VALUES IN ('x');
CREATE TEMP TABLE regress_partition PARTITION OF platformkit_limits FOR VALUES IN ('x');
CREATE FOREIGN TABLE regress_foreign PARTITION OF platformkit_limits FOR VALUES IN ('x') SERVER regress_nosuch;
CREATE TEMP TABLE regress_child () INHERITS (platformkit_limits);
CREATE TEMP TABLE regress_ref (key text REFERENCES platformkit_limits);
CREATE TEMP TABLE regress_ref (key text, FOREIGN KEY (key) REFERENCES platformkit_limits);
ALTER TABLE regress_parent ADD FOREIGN KEY (key) REFERENCES platformkit_limits;
ALTER INDEX platformkit_limits_pkey DEPENDS ON EXTENSION pklimit;
-- other tables are not concerned
ALTER TABLE regress_parent ADD PRIMARY KEY (key);
CREATE TEMP TABLE regress_ref (key text REFERENCES regress_parent);
DROP TABLE regress_ref, regress_parent;
RESET ROLE;
-- the owner can
BEGIN;
LOCK TABLE platformkit_limits IN EXCLUSIVE MODE;
ROLLBACK;

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM regress_pklimit_app;
REVOKE ALL ON platformkit_limits FROM PUBLIC, regress_pklimit_auditor;
DROP TABLE public.regress_orders;
DROP ROLE regress_pklimit_app;
DROP ROLE regress_pklimit_writer;
DROP ROLE regress_pklimit_auditor;
