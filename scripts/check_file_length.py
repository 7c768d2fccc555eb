#!/usr/bin/env python3
"""Lists the source files longer than a limit, so that every file can be read in one sitting.

Usage: check_file_length.py LIMIT FOLDER... ; exits 1 when one is longer. Source files are C++ (.cpp, .hpp,
.h), Python (.py) and shell (.sh) files; a file that grows past the limit is split along its seams (one
family of ops, one optimizer, one direction of a kernel), each part with a header comment of its own.
"""
import pathlib
import sys

SUFFIXES = {".cpp", ".hpp", ".h", ".py", ".sh"}


def main():
    limit, folders = int(sys.argv[1]), sys.argv[2:]
    failures = 0
    for folder in folders:
        for path in sorted(p for p in pathlib.Path(folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()):
            lines = len(path.read_text().splitlines())
            if lines > limit:
                print(f"{path}: {lines} lines (the limit is {limit}); split it along its seams")
                failures += 1
    print(f"{failures} file(s) over {limit} lines")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
