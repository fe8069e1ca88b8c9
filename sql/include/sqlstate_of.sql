-- sqlstate_of(q): runs q and returns 'no error', or the SQLSTATE and the
-- message of the error it raised (included by the tests that list errors).
CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
