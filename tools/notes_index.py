#!/usr/bin/env python3
"""Prints the index of `Note [...]` blocks for docs/ARCHITECTURE.md, or checks it.

A Note is defined where a comment line is `// Note [Title]` alone or starts a
sentence with `// Note [Title]:`; every other mention cites it. Usage:
  tools/notes_index.py            print the index (markdown table)
  tools/notes_index.py --check    exit 1 when a cited Note is defined nowhere, or the
                                  index of docs/ARCHITECTURE.md lists a Note that is gone
                                  or elsewhere (a Note it lacks is a warning)
  tools/notes_index.py --write    renew the index
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFINITION = re.compile(r"^\s*(?://|#)\s*Note \[([^\]]+)\](?:\s*$|:\s*(?!see\b)\S)")
CITATION = re.compile(r"Note \[([^\]]+)\]")
BEGIN, END = "<!-- notes-index: begin -->", "<!-- notes-index: end -->"


def source_files():
    listed = subprocess.run(["git", "ls-files", "*.h", "*.cc", "*.py", "*.sh", "BUILD.bazel"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [p for p in listed.split() if not p.startswith("third_party/")]


def scan():
    defined, cited = {}, {}
    for path in source_files():
        if path.startswith("tools/") and path.endswith((".py", ".sh")):
            continue  # the checkers themselves mention Notes only as examples
        try:
            lines = (ROOT / path).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for number, line in enumerate(lines, 1):
            match = DEFINITION.match(line)
            if match:
                # A header line alone outranks an inline "Note [X]: ..." sentence, and
                # the code's own statement outranks a test's restatement of it.
                rank = (line.strip().endswith("]"), not path.startswith("tests/"))
                if match.group(1) not in defined or rank > defined[match.group(1)][1]:
                    defined[match.group(1)] = (f"{path}:{number}", rank)
                continue
            for title in CITATION.findall(line):
                cited.setdefault(title, f"{path}:{number}")
    return defined, cited


def index(defined):
    rows = ["| Note | defined in |", "| --- | --- |"]
    for title in sorted(defined, key=str.lower):
        rows.append(f"| {title} | `{defined[title][0].split(':')[0]}` |")
    return "\n".join([BEGIN] + rows + [END])


def main():
    defined, cited = scan()
    text = index(defined)
    if "--check" not in sys.argv:
        print(text)
        return 0
    problems = [f"Note [{t}] is cited at {where} but defined nowhere"
                for t, where in sorted(cited.items()) if t not in defined]
    doc = (ROOT / "docs/ARCHITECTURE.md").read_text()
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < 0:
        problems.append("docs/ARCHITECTURE.md: the Notes index markers are missing")
    else:
        listed = re.findall(r"^\| (.+?) \| `([^`]+)` \|$", doc[start:end], re.MULTILINE)
        for title, path in listed:
            if title not in defined:
                problems.append(f"docs/ARCHITECTURE.md lists Note [{title}], which no longer exists")
            elif defined[title][0].split(":")[0] != path:
                problems.append(f"docs/ARCHITECTURE.md places Note [{title}] in {path}; it moved "
                                f"to {defined[title][0].split(':')[0]}")
        missing = sorted(set(defined) - {title for title, _ in listed})
        if missing:
            # A new Note is only a warning: the index is renewed with --write.
            print(f"warning: docs/ARCHITECTURE.md's Notes index lacks {len(missing)} Note(s) "
                  f"({', '.join(missing)}); tools/notes_index.py --write adds them")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    if "--write" in sys.argv:
        defined, _ = scan()
        path = ROOT / "docs/ARCHITECTURE.md"
        doc = path.read_text()
        start, end = doc.find(BEGIN), doc.find(END)
        block = index(defined)
        doc = doc[:start] + block + doc[end + len(END):] if start >= 0 and end >= 0 \
            else doc.replace("NOTES_INDEX", block)
        path.write_text(doc)
        sys.exit(0)
    sys.exit(main())
