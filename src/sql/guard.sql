-- guard.sql: the planted-name guard of every update (src/sql/; make puts
-- it where an update's source says "--@include guard.sql").
--
-- An object of one of pklimit's names in its schema that is not pklimit's
-- own could take the place of pklimit's functions in a call, whatever its
-- arguments: an overload such as pklimit_allow(text, integer, interval)
-- would be a better match for a call than pklimit's own.  CREATE EXTENSION
-- refuses a schema holding one, and so does the update (for one planted
-- while an older version was installed).  An index on pklimit's table is
-- pklimit's own.  The list holds every name of every release: a release
-- adds its new names to it.
DO $check$
DECLARE
	installing pg_catalog.bool;
	planted pg_catalog.text;
BEGIN
	WITH pklimit_names(names) AS (
		SELECT ARRAY['platformkit_is_system', 'platformkit_limits', 'pklimit_allow',
				'pklimit_check', 'pklimit_count', 'pklimit_forget', 'pklimit_purge',
				'pklimit_purge_status', 'pklimit_schedule_purge', 'pklimit_check_all',
				'pklimit_allow_all', 'pklimit_stats', 'pklimit_stats_reset',
				'pklimit_purge_job_error', 'platformkit_limits_pkey',
				'pklimit_decrement', 'pklimit_memory_stats',
				'platformkit_limits_purge_idx', 'pklimit_stored_key', 'pklimit_node',
				'platformkit_limit_policies', 'platformkit_limit_policies_pkey',
				'pklimit_policies', 'pklimit_policies_changed', 'pklimit_policy_set',
				'pklimit_policy_drop', 'pklimit_policy_stats', 'pklimit_window',
				'pklimit_policy_rows', 'platformkit_leases', 'platformkit_leases_pkey',
				'platformkit_leases_purge_idx', 'pklimit_acquire', 'pklimit_acquire_check',
				'pklimit_release', 'pklimit_renew', 'pklimit_leases']::pg_catalog.name[]),
	members AS (
		SELECT d.classid, d.objid FROM pg_catalog.pg_depend d
		 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
				WHERE e.extname OPERATOR(pg_catalog.=) 'pklimit')
		   AND d.deptype OPERATOR(pg_catalog.=) 'e')
	SELECT NOT EXISTS (SELECT FROM members),
		   pg_catalog.string_agg(o.kind OPERATOR(pg_catalog.||) ' ' OPERATOR(pg_catalog.||) o.name,
			', ' ORDER BY o.name, o.kind)
	  INTO installing, planted
	  FROM (SELECT 'function' AS kind, p.oid::pg_catalog.regprocedure::pg_catalog.text AS name,
				   'pg_catalog.pg_proc'::pg_catalog.regclass AS classid, p.oid AS objid
			  FROM pg_catalog.pg_proc p, pklimit_names n
			 WHERE p.pronamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND p.proname OPERATOR(pg_catalog.=) ANY (n.names)
			UNION ALL
			SELECT 'relation', c.relname::pg_catalog.text, 'pg_catalog.pg_class'::pg_catalog.regclass,
				   COALESCE(x.indrelid, c.oid)
			  FROM pg_catalog.pg_class c
				   LEFT JOIN pg_catalog.pg_index x ON x.indexrelid OPERATOR(pg_catalog.=) c.oid,
				   pklimit_names n
			 WHERE c.relnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND c.relname OPERATOR(pg_catalog.=) ANY (n.names)
			UNION ALL
			SELECT 'type', t.typname::pg_catalog.text, 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid
			  FROM pg_catalog.pg_type t, pklimit_names n
			 WHERE t.typnamespace OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
			   AND t.typname OPERATOR(pg_catalog.=) ANY (n.names)
			   AND t.typrelid OPERATOR(pg_catalog.=) 0) o
	 WHERE NOT EXISTS (SELECT FROM members m
						WHERE m.classid OPERATOR(pg_catalog.=) o.classid
						  AND m.objid OPERATOR(pg_catalog.=) o.objid);
	IF planted IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'duplicate_object',
			MESSAGE = pg_catalog.format(CASE WHEN installing
				THEN 'schema %s already has objects with pklimit''s names: %s'
				ELSE 'schema %s has objects with pklimit''s names that are not pklimit''s: %s' END,
				'@extschema@', planted),
			DETAIL = 'An object of one of pklimit''s names in its schema could take the place of pklimit''s own in a call.',
			HINT = CASE WHEN installing
				THEN 'Rename or drop them, or install pklimit in a schema of its own (CREATE EXTENSION pklimit SCHEMA pklimit).'
				ELSE 'Rename or drop them, then update again.' END;
	END IF;
END
$check$;
