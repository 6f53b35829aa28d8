#!/usr/bin/env python3
"""Lists memory instructions whose cache-policy descriptor register nothing wrote before them.

  cuobjdump -sass KERNELS.cubin | sass_descriptor_check.py      (GPU host: it has cuobjdump)

Reads cuobjdump's SASS listing on stdin. In each function it walks the instructions in
address order, noting the uniform registers written (the first operand of a uniform
instruction: UMOV UR4, ...; ULDC.64 UR6, ... writes UR6 and UR7), and reports every
instruction with an operand desc[URn] where URn or URn+1 was not written earlier in the
listing. Session 20's _x8 GEMV faulted with cudaErrorIllegalInstruction at such an
LDGSTS (desc[UR1], +0x490; ptxas 13.0), the evict-first cp.async of Note [Streamed GEMV
holds A in shared memory]. Address order ignores branches, so a report is a lead to read
in the listing, not a proof; no report for a function means every descriptor register
was written above its first use.
"""
import re
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*([^;]*);")
UNIFORM = re.compile(r"\bUR(\d+)\b")
DESCRIPTOR = re.compile(r"desc\[UR(\d+)\]")


def written(opcode, operands):
    """Uniform registers the instruction writes (its first operand, for uniform opcodes)."""
    if not (opcode.startswith("U") or opcode.startswith(("S2UR", "R2UR", "LDCU"))):
        return set()
    first = operands.split(",")[0].strip()
    match = re.fullmatch(r"UR(\d+)", first)
    if not match:
        return set()
    number = int(match.group(1))
    wide = ".64" in opcode or ".128" in opcode
    return {number, number + 1} if wide else {number}


def main():
    function, seen, reports, checked = None, set(), 0, 0
    for line in sys.stdin:
        match = FUNCTION.search(line)
        if match:
            function, seen = match.group(1), set()
            checked += 1
            continue
        match = INSTRUCTION.search(line)
        if not match or function is None:
            continue
        address, _, opcode, operands = match.groups()
        for used in DESCRIPTOR.findall(operands):
            number = int(used)
            missing = [n for n in (number, number + 1) if n not in seen]
            if missing:
                reports += 1
                print("%s +0x%s: %s %s  (UR%s not written before)" % (
                    function, address, opcode, operands.strip(),
                    ", UR".join(str(n) for n in missing)))
        seen |= written(opcode, operands)
    print("%d functions checked, %d descriptor uses without an earlier write" % (checked, reports))


if __name__ == "__main__":
    main()
