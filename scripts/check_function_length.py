#!/usr/bin/env python3
"""Lists the C++ functions longer than a limit (lines from the opening brace to the closing one).

Usage: check_function_length.py LIMIT FOLDER... ; exits 1 when one is longer. A function is a brace block
opened at namespace or class scope after a parameter list (its body, with the lambdas inside it); comments,
strings and character literals are blanked first so that their braces do not count.
"""
import pathlib
import re
import sys


def blank(text, keep_strings=False):
    """The text with comments, strings and char literals replaced by spaces (newlines kept); with
    keep_strings, comments only."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) + len(m.group(1)) + 2
            out.append(text[i:end] if keep_strings else re.sub(r"[^\n]", " ", text[i:end])); i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1] if keep_strings else " " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def long_functions(path, limit):
    text = blank(path.read_text())
    scopes, found, last = [], [], 0  # each scope: (kind, start line)
    for i, c in enumerate(text):
        if c in ";{}":
            head = text[last:i]
            last = i + 1
        if c == "{":
            outer = scopes[-1][0] if scopes else "namespace"
            if re.search(r"\bnamespace\b", head):
                kind = "namespace"
            elif outer in ("namespace", "class") and re.search(r"\b(class|struct|union|enum)\b[^()=]*$", head):
                kind = "class"
            elif outer in ("namespace", "class") and re.search(r"\)\s*(const|override|final|noexcept|mutable|\s)*(->[^{]*)?$|\)\s*:[^;]*$", head):
                kind = "function"
            else:
                kind = "block"
            scopes.append((kind, text.count("\n", 0, i) + 1))
        elif c == "}" and scopes:
            kind, start = scopes.pop()
            end = text.count("\n", 0, i) + 1
            if kind == "function" and end - start + 1 > limit:
                found.append((start, end - start + 1))
    return found


def main():
    limit, folders = int(sys.argv[1]), sys.argv[2:]
    failures = 0
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*.[ch]pp")):
            for start, lines in long_functions(path, limit):
                print(f"{path}:{start}: a function of {lines} lines (the limit is {limit}); split it")
                failures += 1
    print(f"{failures} function(s) over {limit} lines")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
