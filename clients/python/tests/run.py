"""Runs every test_*.py here and prints one line per test on stdout,
"PASS <test>" or "FAIL <test>" (failures, errors, skips and expected
failures alike: nothing skipped passes), then "RAN <n>"; details go to
stderr.  Exits 0 only if every test passed."""

import logging
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class LineResult(unittest.TextTestResult):
    def _line(self, verdict, test):
        print(f"{verdict} {test.id()}", file=sys.stdout, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self._line("PASS", test)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line("FAIL", test)

    def addError(self, test, err):
        super().addError(test, err)
        self._line("FAIL", test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line("FAIL", test)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line("FAIL", test)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line("FAIL", test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._line("FAIL", subtest)


def main():
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    sys.path.insert(0, HERE)
    suite = unittest.defaultTestLoader.discover(HERE, pattern="test_*.py", top_level_dir=HERE)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1, resultclass=LineResult).run(suite)
    print(f"RAN {result.testsRun}", flush=True)
    clean = result.wasSuccessful() and not result.skipped and not result.expectedFailures
    sys.exit(0 if clean else 1)


if __name__ == "__main__":
    main()
