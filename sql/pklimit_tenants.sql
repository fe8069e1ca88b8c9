-- pklimit_tenants: the tenant in platformkit.tenant is part of the stored
-- key, and the encoding never lets two (tenant, key) pairs meet.

TRUNCATE platformkit_limits;

-- unset and empty tenant are both the global namespace
SELECT pklimit_allow('shared', 10, '36500 days');
SET platformkit.tenant = '';
SELECT pklimit_allow('shared', 10, '36500 days');
SELECT pklimit_count('shared');

-- a tenant has its own count for the same key
SET platformkit.tenant = 'acme';
SELECT pklimit_count('shared');
SELECT pklimit_allow('shared', 10, '36500 days');
SELECT pklimit_count('shared');
RESET platformkit.tenant;
SELECT pklimit_count('shared');

-- tenant 'a' + key 'b:c' never meets tenant 'a:b' + key 'c'
SET platformkit.tenant = 'a';
SELECT pklimit_allow('b:c', 1, '36500 days');
SET platformkit.tenant = 'a:b';
SELECT pklimit_allow('c', 1, '36500 days');
-- tenant '1' + key '21' never meets tenant '12' + key '1'
SET platformkit.tenant = '1';
SELECT pklimit_allow('21', 1, '36500 days');
SET platformkit.tenant = '12';
SELECT pklimit_allow('1', 1, '36500 days');
-- a tenant never meets the global key that spells its encoding
RESET platformkit.tenant;
SELECT pklimit_allow('t1:a:b:c', 1, '36500 days');
-- multibyte tenants count bytes
SET platformkit.tenant = 'zürich';
SELECT pklimit_allow('k', 1, '36500 days');
RESET platformkit.tenant;

-- the stored keys stay readable for a DBA
SELECT key, count FROM platformkit_limits ORDER BY key COLLATE "C";

-- SET LOCAL scopes the tenant to one transaction, as an application would
BEGIN;
SET LOCAL platformkit.tenant = 'acme';
SELECT pklimit_allow('shared', 10, '36500 days');
COMMIT;
SHOW platformkit.tenant;
SET platformkit.tenant = 'acme';
SELECT pklimit_count('shared');

-- forget works inside the caller's tenant only
RESET platformkit.tenant;
SELECT pklimit_forget('shared');
SET platformkit.tenant = 'acme';
SELECT pklimit_count('shared');
RESET platformkit.tenant;
SELECT pklimit_count('shared');

-- long keys are digested with their tenant, so tenants stay apart
SET platformkit.tenant = 'acme';
SELECT pklimit_allow(repeat('L', 400), 1, '36500 days');
SET platformkit.tenant = 'umbrella';
SELECT pklimit_allow(repeat('L', 400), 1, '36500 days');
RESET platformkit.tenant;
SELECT pklimit_allow(repeat('L', 400), 1, '36500 days');
SELECT count(*) FROM platformkit_limits WHERE key LIKE 'h:%';

-- hostile tenants: separators, control characters, digits, 10,000 bytes
TRUNCATE platformkit_limits;
SELECT octet_length(set_config('platformkit.tenant', E'a\nb', false)) AS tenant_bytes;
SELECT pklimit_allow('c', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', 'a', false)) AS tenant_bytes;
SELECT pklimit_allow(E'\nb:c', 1, '36500 days'), pklimit_allow(E'b:c', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', '1:a', false)) AS tenant_bytes;
SELECT pklimit_allow('b', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', '1', false)) AS tenant_bytes;
SELECT pklimit_allow('a:b', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', 't1:x', false)) AS tenant_bytes;
SELECT pklimit_allow('y', 1, '36500 days');
RESET platformkit.tenant;
SELECT pklimit_allow('t4:t1:x:y', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', repeat('T', 10000) || 'a', false)) AS tenant_bytes;
SELECT pklimit_allow('k', 1, '36500 days'), pklimit_allow('k', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', repeat('T', 10000) || 'b', false)) AS tenant_bytes;
SELECT pklimit_allow('k', 1, '36500 days');
SELECT octet_length(set_config('platformkit.tenant', '東京', false)) AS tenant_bytes;
SELECT pklimit_allow('k', 1, '36500 days');
RESET platformkit.tenant;
-- every pair above stayed apart: each key was allowed once in its own row
SELECT key, count FROM platformkit_limits WHERE key NOT LIKE 'h:%' ORDER BY key COLLATE "C";
SELECT count(*) AS digested, sum(count) AS events FROM platformkit_limits WHERE key LIKE 'h:%';
-- pklimit_stored_key() is the stored key a call makes, under the tenant in
-- force: each form above, readable and digested; pklimit_node() names no
-- node where the table is not distributed
SELECT pklimit_stored_key('login:alice') = 'g:login:alice' AS global,
       pklimit_stored_key(repeat('k', 300)) =
         'h:' || encode(sha256(convert_to('g:' || repeat('k', 300), 'UTF8')), 'hex') AS digested;
SELECT octet_length(set_config('platformkit.tenant', 'acme', false)) AS tenant_bytes;
SELECT pklimit_stored_key('login:alice') AS tenant_form;
SELECT pklimit_allow('routed', 1, '36500 days');
SELECT count FROM platformkit_limits WHERE key = pklimit_stored_key('routed');
RESET platformkit.tenant;
SELECT * FROM pklimit_node('login:alice');
\i sql/include/sqlstate_of.sql
SELECT q, pg_temp.sqlstate_of(q) FROM (VALUES
  ($$SELECT pklimit_stored_key(NULL)$$),
  ($$SELECT pklimit_stored_key('')$$),
  ($$SELECT pklimit_node(NULL)$$),
  ($$SELECT pklimit_node('')$$)) v(q);
