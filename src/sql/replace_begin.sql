-- replace_begin.sql: before an update replaces functions (src/sql/; make
-- puts it where an update's source says "--@include replace_begin.sql").
--
-- A function whose arguments change is dropped and created again, since
-- one more argument with a default beside the old signature would make
-- calls ambiguous.  The functions are the signatures in the setting
-- pklimit_update.replaced, separated by ";", which the update sets first.
-- A user's view or function that depends on one of them would be dropped
-- with it: the update is refused instead, naming them.  Then each one's
-- owner and privileges are kept in settings of this transaction, with the
-- functions pklimit had before, for replace_end.sql.
DO $replace_begin$
DECLARE
	replaced pg_catalog.oid[];
	dependents pg_catalog.text;
BEGIN
	SELECT pg_catalog.array_agg(s::pg_catalog.regprocedure::pg_catalog.oid)
	  INTO replaced
	  FROM pg_catalog.regexp_split_to_table(
			pg_catalog.current_setting('pklimit_update.replaced'), '[[:space:]]*;[[:space:]]*') s;
	-- a view by its name, not by its rule's; pklimit's own view (which the
	-- update replaces in place) is not a user's
	WITH dependent AS (
		SELECT COALESCE(r.ev_class, d.objid) AS objid,
			   CASE WHEN r.oid IS NULL THEN d.classid
			   ELSE 'pg_catalog.pg_class'::pg_catalog.regclass END AS classid,
			   CASE WHEN r.oid IS NULL THEN d.objsubid ELSE 0 END AS objsubid
		  FROM pg_catalog.pg_depend d
		  LEFT JOIN pg_catalog.pg_rewrite r
			ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_rewrite'::pg_catalog.regclass
		   AND r.oid OPERATOR(pg_catalog.=) d.objid
		   AND r.rulename OPERATOR(pg_catalog.=) '_RETURN'
		 WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
		   AND d.deptype OPERATOR(pg_catalog.=) 'n'
		   AND d.refobjid OPERATOR(pg_catalog.=) ANY (replaced))
	SELECT pg_catalog.string_agg(DISTINCT
			pg_catalog.pg_describe_object(o.classid, o.objid, o.objsubid), ', ')
	  INTO dependents
	  FROM dependent o
	 WHERE NOT EXISTS (
		SELECT FROM pg_catalog.pg_depend e
		 WHERE e.classid OPERATOR(pg_catalog.=) o.classid
		   AND e.objid OPERATOR(pg_catalog.=) o.objid
		   AND e.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
		   AND e.refobjid OPERATOR(pg_catalog.=) (SELECT x.oid FROM pg_catalog.pg_extension x
				WHERE x.extname OPERATOR(pg_catalog.=) 'pklimit')
		   AND e.deptype OPERATOR(pg_catalog.=) 'e');
	IF dependents IS NOT NULL THEN
		RAISE EXCEPTION USING ERRCODE = 'dependent_objects_still_exist',
			MESSAGE = pg_catalog.format('cannot update pklimit while objects depend on functions it replaces: %s',
				dependents),
			DETAIL = pg_catalog.format('The update drops and creates again %s.',
				(SELECT pg_catalog.string_agg(DISTINCT p.proname::pg_catalog.text, ', ')
				   FROM pg_catalog.pg_proc p
				  WHERE p.oid OPERATOR(pg_catalog.=) ANY (replaced))),
			HINT = 'Drop those objects, run ALTER EXTENSION pklimit UPDATE, then create them again; a temporary one (in a pg_temp schema) goes when its session ends.';
	END IF;
	PERFORM pg_catalog.set_config('pklimit_update.acl_' OPERATOR(pg_catalog.||) p.proname,
				COALESCE(p.proacl::pg_catalog.text, ''), true),
			pg_catalog.set_config('pklimit_update.owner_' OPERATOR(pg_catalog.||) p.proname,
				p.proowner::pg_catalog.regrole::pg_catalog.text, true)
	   FROM pg_catalog.pg_proc p
	  WHERE p.oid OPERATOR(pg_catalog.=) ANY (replaced);
	PERFORM pg_catalog.set_config('pklimit_update.replaced_names',
				(SELECT pg_catalog.string_agg(p.proname::pg_catalog.text, ',')
				   FROM pg_catalog.pg_proc p
				  WHERE p.oid OPERATOR(pg_catalog.=) ANY (replaced)), true),
			pg_catalog.set_config('pklimit_update.before',
				(SELECT pg_catalog.string_agg(d.objid::pg_catalog.text, ',')
				   FROM pg_catalog.pg_depend d
				  WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
					AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
					AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
						 WHERE e.extname OPERATOR(pg_catalog.=) 'pklimit')
					AND d.deptype OPERATOR(pg_catalog.=) 'e'), true);
END
$replace_begin$;
