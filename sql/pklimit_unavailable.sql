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

-- a worker's error reaches the caller whole: the message of a constraint
-- the owner added, longer than 127 bytes
ALTER TABLE platformkit_limits ADD CONSTRAINT
  regress_a_check_constraint_whose_name_takes_sixty_three_bytes__
  CHECK (key <> 'g:constrained' OR count < 2) NOT VALID;
SELECT allowed, status FROM pklimit_check('constrained', 5, '36500 days');
SELECT allowed, status FROM pklimit_check('constrained', 5, '36500 days');
ALTER TABLE platformkit_limits
  DROP CONSTRAINT regress_a_check_constraint_whose_name_takes_sixty_three_bytes__;
-- and one longer than 512 bytes is cut there, ending in " [...]"
CREATE FUNCTION public.regress_refuse(n bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF n >= 2 THEN
    RAISE EXCEPTION 'refused: %', repeat('x', 600);
  END IF;
  RETURN true;
END
$$;
ALTER TABLE platformkit_limits ADD CONSTRAINT regress_refused
  CHECK (key <> 'g:constrained' OR public.regress_refuse(count)) NOT VALID;
SELECT allowed, status FROM pklimit_check('constrained', 5, '36500 days');
ALTER TABLE platformkit_limits DROP CONSTRAINT regress_refused;
DROP FUNCTION public.regress_refuse(bigint);
SELECT pklimit_forget('constrained');
