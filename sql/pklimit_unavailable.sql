-- pklimit_unavailable: when the store cannot be reached in time, the call
-- answers as pklimit.on_unavailable says, with a WARNING naming the reason;
-- bad input is never "unavailable".  The row is made unreachable by locking
-- it in the caller's own open transaction.

SHOW pklimit.timeout;
SHOW pklimit.on_unavailable;

SELECT pklimit_allow('unreachable', 5, '36500 days');
BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:unreachable' FOR UPDATE;
SET LOCAL pklimit.timeout = '500ms';

-- allow (the default): true, with a warning
SELECT pklimit_allow('unreachable', 5, '36500 days');
\set VERBOSITY sqlstate
SELECT pklimit_allow('unreachable', 5, '36500 days');
\set VERBOSITY default
SELECT * FROM pklimit_check('unreachable', 5, '36500 days');
-- count only reads, so a row lock does not hold it up
SELECT pklimit_count('unreachable');
SELECT pklimit_forget('unreachable') IS NULL AS forget_unknown;

-- deny: false, with a warning
SET LOCAL pklimit.on_unavailable = deny;
SELECT pklimit_allow('unreachable', 5, '36500 days');
SELECT allowed, status FROM pklimit_check('unreachable', 5, '36500 days');
-- another key is served meanwhile
SELECT allowed, count, status FROM pklimit_check('reachable', 5, '36500 days');
-- bad input stays an error whatever on_unavailable says
SELECT pklimit_allow('', 5, '36500 days');
ROLLBACK;

BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:unreachable' FOR UPDATE;
SET LOCAL pklimit.timeout = '500ms';
SET LOCAL pklimit.on_unavailable = error;
\set VERBOSITY sqlstate
SELECT pklimit_allow('unreachable', 5, '36500 days');
\set VERBOSITY default
ROLLBACK;

BEGIN;
SELECT count FROM platformkit_limits WHERE key = 'g:unreachable' FOR UPDATE;
SET LOCAL pklimit.timeout = '500ms';
SET LOCAL pklimit.on_unavailable = error;
SELECT pklimit_forget('unreachable');
ROLLBACK;

-- none of the unanswered calls was recorded; the lock is gone and the key
-- is served again
SELECT pklimit_count('unreachable');
SELECT allowed, count, status FROM pklimit_check('unreachable', 5, '36500 days');
