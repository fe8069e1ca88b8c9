/* pklimit--0.1.0--0.2.0.sql: update script from pklimit 0.1.0 to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.2.0'" to load this file. \quit

-- The same rules as the install script: every object by its schema-qualified
-- name, never CREATE OR REPLACE over an object a user could have planted, and
-- what changes here changes in pklimit--0.2.0.sql too (test/t/090_upgrade.pl
-- compares an updated database with a fresh install).

-- From 0.2.0 nobody but the table's owner holds the privileges that let a
-- role write the table, lock it against pklimit's writes or get around its
-- row level security (the GRANT guard leaves them out); 0.1.0 allowed
-- INSERT, UPDATE and DELETE to be granted.  SELECT grants stay.
DO $do$
DECLARE
	grantee_ text;
	privileges text := 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER';
BEGIN
	IF pg_catalog.current_setting('server_version_num')::pg_catalog.int4 OPERATOR(pg_catalog.>=) 170000 THEN
		privileges := privileges OPERATOR(pg_catalog.||) ', MAINTAIN';
	END IF;
	FOR grantee_ IN
		SELECT DISTINCT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
			   ELSE pg_catalog.quote_ident(r.rolname) END
		FROM (SELECT c.relowner, c.relacl AS acl
				FROM pg_catalog.pg_class c
			   WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
			  UNION ALL
			  SELECT c.relowner, t.attacl
				FROM pg_catalog.pg_class c
				JOIN pg_catalog.pg_attribute t ON t.attrelid OPERATOR(pg_catalog.=) c.oid
			   WHERE c.oid OPERATOR(pg_catalog.=) '@extschema@.platformkit_limits'::pg_catalog.regclass
				 AND t.attacl IS NOT NULL) o,
			 pg_catalog.aclexplode(o.acl) a
			 LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
		WHERE a.grantee OPERATOR(pg_catalog.<>) o.relowner
		AND a.privilege_type OPERATOR(pg_catalog.<>) 'SELECT'
	LOOP
		EXECUTE pg_catalog.format('REVOKE %s ON @extschema@.platformkit_limits FROM %s CASCADE',
			privileges, grantee_);
	END LOOP;
END
$do$;
