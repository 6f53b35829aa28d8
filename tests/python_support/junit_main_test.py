"""junit_main writes one <testcase> per unittest case, with its outcome."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

import junit_main


class JunitMainTest(unittest.TestCase):
    def test_each_case_is_written_with_its_outcome(self):
        with tempfile.TemporaryDirectory() as scratch:
            module = os.path.join(scratch, "sample_test.py")
            with open(module, "w") as f:
                f.write(textwrap.dedent("""
                    import unittest, junit_main
                    class Sample(unittest.TestCase):
                        def test_ok(self): pass
                        def test_bad(self): self.assertEqual(1, 2)
                        @unittest.skip("no device")
                        def test_skipped(self): pass
                    if __name__ == "__main__":
                        junit_main.main()
                    """))
            xml_path = os.path.join(scratch, "out.xml")
            env = dict(os.environ, XML_OUTPUT_FILE=xml_path,
                       PYTHONPATH=os.path.dirname(junit_main.__file__))
            run = subprocess.run([sys.executable, module], env=env, capture_output=True)
            self.assertEqual(run.returncode, 1, "a failing case must fail the run")
            cases = {c.get("name"): c for c in ET.parse(xml_path).getroot().iter("testcase")}
            self.assertEqual(set(cases), {"test_ok", "test_bad", "test_skipped"})
            self.assertEqual(list(cases["test_ok"]), [])
            self.assertEqual(cases["test_bad"][0].tag, "failure")
            self.assertEqual(cases["test_skipped"][0].tag, "skipped")


if __name__ == "__main__":
    junit_main.main()
