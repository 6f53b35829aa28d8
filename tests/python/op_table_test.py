"""README.md's op table is the one tools/op_table.py generates from the
importer's converter table."""
import os
import sys
import unittest

import junit_main


def _repository_file(path):
    runfiles = os.environ.get("TEST_SRCDIR")
    if runfiles:
        candidate = os.path.join(runfiles, os.environ.get("TEST_WORKSPACE", "__main__"), path)
        if os.path.exists(candidate):
            return candidate
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", path)


class OpTableTest(unittest.TestCase):
    def test_readme_table_is_generated_from_the_converters(self):
        sys.path.insert(0, os.path.dirname(_repository_file("tools/op_table.py")))
        import op_table

        with open(_repository_file("README.md")) as handle:
            text = handle.read()
        self.assertEqual(op_table.updated(text), text,
                         "README.md's op table is stale: run tools/op_table.py")


if __name__ == "__main__":
    junit_main.main()
