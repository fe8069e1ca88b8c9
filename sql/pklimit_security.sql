-- pklimit_security: row level security, privileges and the system predicate,
-- tested as roles that are neither superuser nor BYPASSRLS.

-- the table: RLS enabled and forced, one policy in both directions
SELECT relrowsecurity, relforcerowsecurity
  FROM pg_class WHERE oid = 'platformkit_limits'::regclass;
SELECT polname, polcmd, polpermissive,
       pg_get_expr(polqual, polrelid) AS using_expr,
       pg_get_expr(polwithcheck, polrelid) AS with_check_expr
  FROM pg_policy WHERE polrelid = 'platformkit_limits'::regclass;
SELECT obj_description('platformkit_limits'::regclass, 'pg_class')
       LIKE '%platformkit:tenant-scoping-exempt%' AS exempt_comment;
-- registered as extension configuration, so pg_dump keeps its rows
SELECT extconfig::regclass[] FROM pg_extension WHERE extname = 'pklimit';
-- an index serves the purge
SELECT indexdef FROM pg_indexes
 WHERE tablename = 'platformkit_limits' ORDER BY indexname;

-- every public function has a comment
SELECT p.oid::regprocedure AS function, obj_description(p.oid, 'pg_proc') IS NOT NULL AS commented
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pklimit')
 ORDER BY p.oid::regprocedure::text;

-- who may execute what: purge is not for PUBLIC
SELECT p.oid::regprocedure AS function,
       has_function_privilege('public', p.oid, 'EXECUTE') AS public_execute
  FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid AND d.classid = 'pg_proc'::regclass
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pklimit')
 ORDER BY p.oid::regprocedure::text;

CREATE ROLE regress_pklimit_app NOSUPERUSER NOBYPASSRLS;
CREATE ROLE regress_pklimit_granted NOSUPERUSER NOBYPASSRLS;
-- INSERT, UPDATE and DELETE are left out of the grant (pklimit_grants)
\set VERBOSITY terse
GRANT SELECT, INSERT, UPDATE, DELETE ON platformkit_limits TO regress_pklimit_granted;
\set VERBOSITY default
SELECT pklimit_allow('victim', 3, '36500 days');

-- an application role with no grants: the functions work, the table is shut
SET ROLE regress_pklimit_app;
SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user;
SELECT pklimit_allow('app-key', 1, '36500 days'), pklimit_allow('app-key', 1, '36500 days');
SELECT allowed, count, remaining FROM pklimit_check('app-key', 1, '36500 days');
SELECT pklimit_count('app-key'), pklimit_count('victim');
SELECT pklimit_forget('app-key');
SELECT platformkit_is_system();
SELECT * FROM platformkit_limits;
INSERT INTO platformkit_limits VALUES ('g:victim', now(), now() + interval '1 hour', 0, now());
DELETE FROM platformkit_limits;
SELECT pklimit_purge();
-- no setting makes the predicate true
SET platformkit.is_system = on;
SET pklimit.is_system = on;
SELECT platformkit_is_system();
RESET ROLE;

-- a role granted everything on the table (SELECT left out: pklimit_grants) reads
-- and changes no row
SET ROLE regress_pklimit_granted;
SELECT count(*) FROM platformkit_limits;
UPDATE platformkit_limits SET count = 0;
DELETE FROM platformkit_limits;
INSERT INTO platformkit_limits VALUES ('g:victim', now(), now() + interval '1 hour', 0, now());
SELECT pklimit_purge();
RESET ROLE;
SELECT count FROM platformkit_limits WHERE key = 'g:victim';

-- EXECUTE on the purge is what decides: it runs as the table's owner
GRANT EXECUTE ON FUNCTION pklimit_purge(interval) TO regress_pklimit_app;
SET ROLE regress_pklimit_app;
SELECT pklimit_purge();
RESET ROLE;
GRANT EXECUTE ON FUNCTION pklimit_purge(interval) TO regress_pklimit_granted;
SET ROLE regress_pklimit_granted;
SELECT pklimit_purge('0');
RESET ROLE;

-- a table owned by an ordinary role: pklimit's own statements pass the
-- policy through platformkit_is_system(); the owner itself sees nothing
CREATE ROLE regress_pklimit_owner NOSUPERUSER NOBYPASSRLS;
ALTER TABLE platformkit_limits OWNER TO regress_pklimit_owner;
SET ROLE regress_pklimit_app;
SELECT pklimit_allow('owned', 1, '36500 days'), pklimit_allow('owned', 1, '36500 days');
SELECT pklimit_count('owned'), pklimit_forget('owned'), pklimit_count('owned');
RESET ROLE;
SET ROLE regress_pklimit_owner;
SELECT count(*) FROM platformkit_limits;
INSERT INTO platformkit_limits VALUES ('g:planted', now(), now() + interval '1 hour', 0, now());
RESET ROLE;
ALTER TABLE platformkit_limits OWNER TO CURRENT_USER;

REVOKE ALL ON platformkit_limits FROM regress_pklimit_granted;
REVOKE ALL ON FUNCTION pklimit_purge(interval) FROM regress_pklimit_app, regress_pklimit_granted;
DROP ROLE regress_pklimit_app;
DROP ROLE regress_pklimit_granted;
DROP ROLE regress_pklimit_owner;
