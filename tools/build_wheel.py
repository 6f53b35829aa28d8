#!/usr/bin/env python3
"""Writes grove's wheel, grove-<version>-py3-none-<platform>.whl: the grove
package with libgrove.so beside it (where grove/_capi.py looks first, after
GROVE_LIBRARY) and grove_weights. The wheel is a zip written here by hand,
following the wheel format (PEP 427: .dist-info with METADATA, WHEEL and a
RECORD of every file's sha256 and size), so no setuptools and no network are
needed. The same inputs give the same bytes (fixed timestamps, sorted
entries). tools/build_wheel.sh builds the library and calls this.

    tools/build_wheel.py --library bazel-bin/capi/libgrove.so --out dist
"""
import argparse
import base64
import hashlib
import os
import platform
import re
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("grove", "grove_weights")  # under python/
# Zip timestamps: 1980-01-01, the earliest a zip holds, so the bytes never
# depend on when the wheel was built.
EPOCH = (1980, 1, 1, 0, 0, 0)


def version(python_dir):
    """grove.__version__, read from python/grove/version.py's text (importing
    the package is not needed to package it)."""
    path = os.path.join(python_dir, "grove", "version.py")
    with open(path) as handle:
        found = re.search(r'^__version__ = "([0-9][0-9A-Za-z.+-]*)"$', handle.read(), re.M)
    if not found:
        raise SystemExit("build_wheel: %s has no __version__ = \"X.Y.Z\" line" % path)
    return found.group(1)


def platform_tag():
    """linux_<machine>: libgrove.so is one platform's code; the Python is any 3.x."""
    if not sys.platform.startswith("linux"):
        raise SystemExit("build_wheel: libgrove.so is a Linux library; build the wheel on Linux")
    return "linux_" + platform.machine().replace("-", "_").replace(".", "_")


def package_files(python_dir):
    """(path in the wheel, path on disk) of every module of PACKAGES."""
    files = []
    for package in PACKAGES:
        directory = os.path.join(python_dir, package)
        for name in sorted(os.listdir(directory)):
            if name.endswith(".py"):
                files.append(("%s/%s" % (package, name), os.path.join(directory, name)))
    return files


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def metadata(name, release):
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: grove: trees of CUDA graphs for a JIT compiler, from Python "
            "(ctypes over libgrove.so; PyTorch's torch.compile backend)\n"
            "Requires-Python: >=3.8\n" % (name, release))


def wheel_text(tag):
    return ("Wheel-Version: 1.0\n"
            "Generator: grove tools/build_wheel.py\n"
            "Root-Is-Purelib: false\n"
            "Tag: %s\n" % tag)


def build(library, out_dir, python_dir, compress_library=True):
    """Writes the wheel into out_dir and returns its path. compress_library
    False stores libgrove.so as is (gpu_bundle.sh: its xz pass then shares
    the library's code with the test binaries')."""
    release = version(python_dir)
    tag = "py3-none-" + platform_tag()
    dist_info = "grove-%s.dist-info" % release
    entries = []  # (path in the wheel, bytes, executable)
    for path, source in package_files(python_dir):
        with open(source, "rb") as handle:
            entries.append((path, handle.read(), False))
    with open(library, "rb") as handle:
        entries.append(("grove/libgrove.so", handle.read(), True))
    entries.append((dist_info + "/METADATA", metadata("grove", release).encode(), False))
    entries.append((dist_info + "/WHEEL", wheel_text(tag).encode(), False))
    entries.append((dist_info + "/top_level.txt", "".join(p + "\n" for p in PACKAGES).encode(),
                    False))
    record = [record_line(path, data) for path, data, _ in entries]
    record.append(dist_info + "/RECORD,,")
    entries.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode(), False))

    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, "grove-%s-%s.whl" % (release, tag))
    partial = wheel + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data, executable in entries:  # RECORD last, as the format asks
            info = zipfile.ZipInfo(path, date_time=EPOCH)
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            stored = executable and not compress_library
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(partial, wheel)
    return wheel


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", required=True, help="the libgrove.so to bundle")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"), help="output directory")
    parser.add_argument("--python", default=os.path.join(ROOT, "python"),
                        help="the directory holding the grove and grove_weights packages")
    parser.add_argument("--store-library", action="store_true",
                        help="store libgrove.so uncompressed (for an archive compressed again)")
    args = parser.parse_args()
    if not os.path.isfile(args.library):
        raise SystemExit("build_wheel: %s is not a file; build it with "
                         "`bazel build //capi:libgrove.so`" % args.library)
    print(build(args.library, args.out, args.python, not args.store_library))


if __name__ == "__main__":
    main()
