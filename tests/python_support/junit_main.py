"""Runs a test module's unittest cases and writes one JUnit <testcase> per case.

Bazel's own test.xml for a py_test holds a single case for the whole file;
tools/test.sh counts <testcase> elements, so Python tests call main() to be
counted case by case, like the GoogleTest binaries:

    if __name__ == "__main__":
        junit_main.main()
"""
import os
import sys
import time
import unittest
import xml.etree.ElementTree as ET


class _RecordingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []  # (test id, seconds, outcome, detail)
        self._started = 0.0

    def startTest(self, test):
        self._started = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        self.cases.append((test.id(), time.monotonic() - self._started, outcome, detail))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failure", "unexpected success")


def _write_junit(path, cases):
    suite = ET.Element("testsuite", name=os.path.basename(sys.argv[0]), tests=str(len(cases)))
    for test_id, seconds, outcome, detail in cases:
        classname, _, name = test_id.rpartition(".")
        case = ET.SubElement(suite, "testcase", classname=classname, name=name,
                             time=f"{seconds:.3f}")
        if outcome != "passed":
            ET.SubElement(case, outcome, message=detail.splitlines()[0] if detail else "").text = detail
    root = ET.Element("testsuites")
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def main(module="__main__"):
    """Runs every TestCase of `module`; exits 0 only when none failed."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[module])
    runner = unittest.TextTestRunner(resultclass=_RecordingResult, verbosity=2)
    result = runner.run(suite)
    output = os.environ.get("XML_OUTPUT_FILE")
    if output:
        _write_junit(output, result.cases)
    sys.exit(0 if result.wasSuccessful() else 1)
