/* pklimit--0.1.0--0.2.0.sql: update script from pklimit 0.1.0 to 0.2.0 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pklimit UPDATE TO '0.2.0'" to load this file. \quit

-- The same rules as the install script: every object by its schema-qualified
-- name, never CREATE OR REPLACE over an object a user could have planted, and
-- what changes here changes in pklimit--0.2.0.sql too (test/t/090_upgrade.pl
-- compares an updated database with a fresh install).
