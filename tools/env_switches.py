#!/usr/bin/env python3
"""Checks that the README's Configuration section names every GROVE_* environment
variable the product reads, and names none that nothing reads any more.

A variable is read where product code (not tests or benchmarks) holds its name as a
string literal ("GROVE_LOG", 'GROVE_VERIFY'). Usage:
  tools/env_switches.py           list the product's variables, each with a file that reads it
  tools/env_switches.py --check   exit 1 (naming them) when the README lacks one or lists a gone one
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PRODUCT = ["runtime", "compiler", "cudagraph_trees", "training", "distributed", "weights",
           "serving", "cli", "capi", "python/grove"]
LITERAL = re.compile(r"""["'](GROVE_[A-Z0-9_]+)["']""")
NAMED = re.compile(r"`(GROVE_[A-Z0-9_]+)`")
SECTION = "## Configuration"


def read_by_product():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--"]
                            + PRODUCT, cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    readers = {}
    for path in listed:
        if not path.endswith((".h", ".cc", ".cu", ".cuh", ".py")):
            continue
        file = ROOT / path
        if not file.is_file():
            continue
        for name in LITERAL.findall(file.read_text(errors="replace")):
            readers.setdefault(name, path)
    return readers


def named_in_readme():
    text = (ROOT / "README.md").read_text()
    start = text.find("\n" + SECTION + "\n")
    if start < 0:
        sys.exit("README.md has no '%s' section" % SECTION)
    section = text[start + 1:]
    end = re.search(r"\n## ", section[len(SECTION):])
    if end:
        section = section[:len(SECTION) + end.start()]
    return set(NAMED.findall(section))


def main():
    readers = read_by_product()
    if sys.argv[1:] != ["--check"]:
        for name in sorted(readers):
            print("%-40s %s" % (name, readers[name]))
        return 0
    named = named_in_readme()
    missing = sorted(set(readers) - named)
    gone = sorted(named - set(readers))
    for name in missing:
        print("README.md's Configuration lacks %s (read in %s)" % (name, readers[name]))
    for name in gone:
        print("README.md's Configuration lists %s, which no product code reads" % name)
    return 1 if missing or gone else 0


if __name__ == "__main__":
    sys.exit(main())
