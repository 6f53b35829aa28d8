"""mutated(rng, data): `data` with one to five random edits, each a byte
changed, bytes inserted or bytes deleted, and, where `extra` pieces are
given, one of them inserted (CRLFs, NULs, a chunked header): what the
serving fuzz tests (http_fuzz_test, grpc_fuzz_test) send."""


def mutated(rng, data, extra=()):
    data = bytearray(data)
    kinds = 4 if extra else 3
    for _ in range(rng.randrange(1, 6)):
        at = rng.randrange(len(data) + 1)
        kind = rng.randrange(kinds)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif kind == 2 and data:
            del data[at:at + rng.randrange(1, 9)]
        elif kind == 3:
            data[at:at] = rng.choice(extra)
    return bytes(data)
