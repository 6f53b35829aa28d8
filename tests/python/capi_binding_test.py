"""The ctypes binding (python/grove/_capi.py) against the C API's header
(capi/grove.h), parsed: every function the header declares is declared by the
binding with as many arguments, and nothing else; the C API versions agree;
a library of another version is refused when it loads, naming both."""
import ctypes
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grove import _capi  # noqa: E402
import junit_main  # noqa: E402

DECLARATION = re.compile(
    r"(grove_status|void|int|const char\s*\*)\s+(grove_\w+)\s*\(([^;{]*?)\)\s*;")


def header_path():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "..", "..", "capi", "grove.h")]
    runfiles = os.environ.get("TEST_SRCDIR")
    if runfiles:
        for workspace in sorted(os.listdir(runfiles)):
            candidates.append(os.path.join(runfiles, workspace, "capi", "grove.h"))
    for path in candidates:
        if os.path.exists(path):
            return path
    raise FileNotFoundError("capi/grove.h not found (looked at %s)" % candidates)


def header_functions(text):
    """{name: (return type, argument count)} of the header's functions."""
    functions = {}
    code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    for returns, name, arguments in DECLARATION.findall(code):
        arguments = arguments.strip()
        count = 0 if arguments in ("", "void") else arguments.count(",") + 1
        functions[name] = (re.sub(r"\s+", "", returns), count)
    return functions


class CapiBindingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(header_path()) as header:
            cls.text = header.read()
        cls.functions = header_functions(cls.text)

    def test_every_header_function_is_declared_with_its_argument_count(self):
        self.assertGreater(len(self.functions), 30)
        declared = _capi.signatures()
        for name, (returns, count) in sorted(self.functions.items()):
            if returns == "grove_status":
                self.assertIn(name, declared, "%s is in grove.h but not in _capi.py" % name)
                self.assertEqual(len(declared[name]), count, "%s: %d arguments in grove.h, %d in "
                                 "_capi.py" % (name, count, len(declared[name])))
            elif returns == "void":
                self.assertIn(name, _capi.VOID_FUNCTIONS, name)
                self.assertEqual(count, 1, name)
        for name in declared:
            self.assertIn(name, self.functions, "%s is in _capi.py but not in grove.h" % name)
            self.assertEqual(self.functions[name][0], "grove_status", name)

    def test_the_dtype_table_holds_the_headers_dtype_codes(self):
        from grove import dtypes

        enum = dict((name.lower(), int(code)) for name, code in
                    re.findall(r"GROVE_(F32|F16|BF16|I32|I64|BOOL|F64) = (\d+)", self.text))
        self.assertEqual(enum, dtypes.CODES)
        self.assertEqual([dtypes.NAMES[code] for code in sorted(enum.values())],
                         sorted(enum, key=enum.get))

    def test_the_versions_agree_and_another_version_is_refused(self):
        version = int(re.search(r"#define GROVE_CAPI_VERSION (\d+)", self.text).group(1))
        self.assertEqual(version, _capi.CAPI_VERSION)
        self.assertEqual(_capi.library().grove_capi_version(), version)

        class OtherVersion:
            def __init__(self, lib):
                self.lib = lib

            def __getattr__(self, name):
                if name == "grove_capi_version":
                    return lambda: version + 1
                return getattr(self.lib, name)

        saved_library, saved_declare = _capi._library, _capi._declare
        _capi._library = None
        _capi._declare = lambda lib: OtherVersion(saved_declare(lib))
        try:
            with self.assertRaisesRegex(ImportError, "speaks C API version %d, and this grove "
                                        "package needs version %d" % (version + 1, version)):
                _capi.library()
        finally:
            _capi._library, _capi._declare = saved_library, saved_declare
        self.assertIsInstance(_capi.library(), ctypes.CDLL)


if __name__ == "__main__":
    junit_main.main()
