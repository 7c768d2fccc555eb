#!/usr/bin/env python3
"""Lists the places that decide by a component's name: an == or != between a string literal and

  - anything, when the literal names a component: a value of a config key that chooses one (`task.name`,
    `model.kind`, `model.attention.name`, `train.optimizer.name`, ...: every `*.name` and `*.kind` key of
    `attnlab list --config-keys`, so the registries themselves say which names these are), or
  - an expression naming a component or an analysis part (`kind`, `task`, `kernel`, `optimizer`, `section`:
    `model.kind == "..."`, `section == "ablation"`), whatever the literal.

Such a decision belongs to the component, as a flag or a function it declares once and the registry holds
(a model kind's, a task's, a kernel's, an analysis part's). Comparing a user's input with a fixed keyword
("best", "last", "all") or a file's field with the values its format defines ("train", "finished") is fine.

Usage: check_component_names.py ATTNLAB FOLDER... ; exits 1 when it finds one. Comments are skipped.
"""
import pathlib
import re
import subprocess
import sys

from check_function_length import blank

SUBJECTS = r"(?:kind|task|kernel|optimizer|section)"
LITERAL = r'"((?:[^"\\\n]|\\.)*)"'
OPERAND = r"[\w.\->\[\]]*(?:\(\))?"  # x, a.b, p->q, v[i], f()
COMPARISONS = [
    re.compile(rf"({OPERAND})\s*[!=]=\s*{LITERAL}"),   # x == "literal"
    re.compile(rf"{LITERAL}\s*[!=]=\s*({OPERAND})"),   # "literal" == x
]


def component_names(attnlab):
    """The values of every config key that chooses a component (`*.name`, `*.kind`)."""
    tables = subprocess.run([attnlab, "list", "--config-keys"], check=True, capture_output=True, text=True).stdout
    names = set()
    for key, values in re.findall(r"^\| `([\w.]+)` \| [^|]* \| ([^|]*) \|", tables, re.M):
        listed = [v.strip() for v in values.split(",")]
        if re.search(r"\.(name|kind)$", key) and len(listed) > 1:  # a list of names, not a type ("text")
            names.update(v for v in listed if re.fullmatch(r"[a-z][a-z0-9_]*", v))
    return names


def decisions(path, names):
    text = blank(path.read_text(), keep_strings=True)
    for number, line in enumerate(text.splitlines(), 1):
        for pattern in COMPARISONS:
            for m in pattern.finditer(line):
                operand, literal = (m.group(1), m.group(2)) if pattern is COMPARISONS[0] else (m.group(2), m.group(1))
                names_component = re.search(rf"(?:^|[^a-zA-Z0-9]){SUBJECTS}(?:\(\))?$", operand)
                if literal in names or names_component:
                    yield number, m.group(0).strip()


def main():
    attnlab, folders = sys.argv[1], sys.argv[2:]
    names = component_names(attnlab)
    if not names:
        print(f"{attnlab} list --config-keys named no component: is it the attnlab command?")
        return 1
    failures = 0
    for folder in folders:
        for path in sorted(pathlib.Path(folder).rglob("*.[ch]pp")):
            for number, comparison in decisions(path, names):
                print(f"{path}:{number}: decides by a component's name ({comparison}); let the component declare it")
                failures += 1
    print(f"{failures} decision(s) by a component's name")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
