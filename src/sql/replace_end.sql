-- replace_end.sql: after an update created its functions (src/sql/; make
-- puts it where an update's source says "--@include replace_end.sql").
--
-- Each function the update created (a member of pklimit that was not one
-- before replace_begin.sql) takes the owner and privileges of the function
-- of its name it replaced, or else the privileges of the function named
-- for it in the setting pklimit_update.privileges_from ("name=signature", separated
-- by ";"), or else the defaults.  The privileges become a user's grants,
-- each made by its grantor as before (recorded as no initial privileges of
-- the extension, which pg_dump then dumps as a user's), and what default
-- privileges (ALTER DEFAULT PRIVILEGES) gave a new function gives way to
-- them: a database that took recording away from PUBLIC does not get it
-- back with the new functions.
DO $replace_end$
DECLARE
	f record;
	a record;
	statement pg_catalog.text;
	role_before pg_catalog.text := pg_catalog.current_setting('role');
BEGIN
	FOR f IN
		WITH created AS (
			SELECT p.oid, p.proname::pg_catalog.text AS name, p.proowner, p.proacl
			  FROM pg_catalog.pg_depend d
			  JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) d.objid
			 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
			   AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
			   AND d.refobjid OPERATOR(pg_catalog.=) (SELECT e.oid FROM pg_catalog.pg_extension e
					WHERE e.extname OPERATOR(pg_catalog.=) 'pklimit')
			   AND d.deptype OPERATOR(pg_catalog.=) 'e'
			   AND d.objid::pg_catalog.text OPERATOR(pg_catalog.<>) ALL (pg_catalog.string_to_array(
					pg_catalog.current_setting('pklimit_update.before'), ','))),
		replaced AS (
			SELECT c.oid, c.name OPERATOR(pg_catalog.=) ANY (pg_catalog.string_to_array(
					pg_catalog.current_setting('pklimit_update.replaced_names'), ',')) AS replaced
			  FROM created c),
		likes AS (
			SELECT pg_catalog.split_part(l, '=', 1) AS name,
				   pg_catalog.split_part(l, '=', 2)::pg_catalog.regprocedure AS model
			  FROM pg_catalog.regexp_split_to_table(
					pg_catalog.current_setting('pklimit_update.privileges_from'), '[[:space:]]*;[[:space:]]*') l
			 WHERE l OPERATOR(pg_catalog.<>) '')
		SELECT c.oid, c.oid::pg_catalog.regprocedure::pg_catalog.text AS signature,
			   c.proowner, c.proacl,
			   CASE WHEN r.replaced
					THEN pg_catalog.current_setting('pklimit_update.owner_' OPERATOR(pg_catalog.||) c.name)
			   END AS owner,
			   CASE WHEN r.replaced
					THEN NULLIF(pg_catalog.current_setting('pklimit_update.acl_'
							OPERATOR(pg_catalog.||) c.name), '')::pg_catalog.aclitem[]
					ELSE (SELECT q.proacl FROM pg_catalog.pg_proc q, likes l
						   WHERE l.name OPERATOR(pg_catalog.=) c.name
							 AND q.oid OPERATOR(pg_catalog.=) l.model)
			   END AS saved
		  FROM created c
		  JOIN replaced r ON r.oid OPERATOR(pg_catalog.=) c.oid
	LOOP
		IF f.owner IS NOT NULL AND f.proowner OPERATOR(pg_catalog.<>) f.owner::pg_catalog.regrole THEN
			EXECUTE pg_catalog.format('ALTER FUNCTION %s OWNER TO %s', f.signature, f.owner);
			f.proowner := f.owner::pg_catalog.regrole;
		END IF;
		IF f.saved IS NULL AND f.proacl IS NULL THEN
			CONTINUE;			-- the defaults, before and after
		END IF;
		FOR a IN
			SELECT DISTINCT CASE WHEN x.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(x.grantee)) END AS grantee
			  FROM pg_catalog.aclexplode(COALESCE(
					(SELECT p.proacl FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) f.oid),
					pg_catalog.acldefault('f', f.proowner))) x
			 WHERE x.grantee OPERATOR(pg_catalog.<>) f.proowner
		LOOP
			EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', f.signature, a.grantee);
		END LOOP;
		-- each grant made again by its grantor, a grant before those its
		-- grant option allowed; one its grantor can no longer make becomes
		-- the owner's, with a WARNING
		FOR a IN
			WITH RECURSIVE items AS (
				SELECT x.grantor, x.grantee, x.is_grantable
				  FROM pg_catalog.aclexplode(COALESCE(f.saved,
						pg_catalog.acldefault('f', f.proowner))) x
				 WHERE x.grantee OPERATOR(pg_catalog.<>) f.proowner),
			chain(grantor, grantee, is_grantable, depth) AS (
				SELECT i.grantor, i.grantee, i.is_grantable, 0 FROM items i
				 WHERE i.grantor OPERATOR(pg_catalog.=) f.proowner
				UNION
				SELECT i.grantor, i.grantee, i.is_grantable, c.depth OPERATOR(pg_catalog.+) 1
				  FROM items i JOIN chain c ON i.grantor OPERATOR(pg_catalog.=) c.grantee
				 WHERE c.is_grantable AND c.depth OPERATOR(pg_catalog.<) 64)
			SELECT i.grantor, i.is_grantable,
				   CASE WHEN i.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
				   ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(i.grantee)) END AS grantee
			  FROM items i
			 ORDER BY (SELECT pg_catalog.min(c.depth) FROM chain c
						WHERE c.grantor OPERATOR(pg_catalog.=) i.grantor
						  AND c.grantee OPERATOR(pg_catalog.=) i.grantee) NULLS LAST
		LOOP
			statement := pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f.signature,
				a.grantee, CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
			IF a.grantor OPERATOR(pg_catalog.=) f.proowner THEN
				EXECUTE statement;
				CONTINUE;
			END IF;
			BEGIN
				PERFORM pg_catalog.set_config('role', pg_catalog.pg_get_userbyid(a.grantor), true);
				EXECUTE statement;
				PERFORM pg_catalog.set_config('role', role_before, true);
			EXCEPTION WHEN OTHERS THEN
				-- (the failed subtransaction takes back its role)
				RAISE WARNING 'pklimit: % of % by % could not be made by %, so the function''s owner made it',
					pg_catalog.split_part(statement, ' TO ', 1), a.grantee,
					pg_catalog.pg_get_userbyid(a.grantor), pg_catalog.pg_get_userbyid(a.grantor)
					USING DETAIL = SQLERRM;
				EXECUTE statement;
			END;
		END LOOP;
		DELETE FROM pg_catalog.pg_init_privs i
		 WHERE i.objoid OPERATOR(pg_catalog.=) f.oid
		   AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
	END LOOP;
END
$replace_end$;
