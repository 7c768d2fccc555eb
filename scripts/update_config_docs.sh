#!/usr/bin/env bash
# Rewrites the key tables of docs/configs.md from the config schema (`build/attnlab list --config-keys`):
# each table follows a marker line "<!-- config-keys: SECTION -->" and ends at the first blank line. Run
# after adding or changing a config key; tests/experiments/test_config.cpp checks that the two agree.
set -euo pipefail
cd "$(dirname "$0")/.."
build/attnlab list --config-keys > build/config_keys.md
python3 - build/config_keys.md docs/configs.md <<'PY'
import re, sys
generated, docs_path = open(sys.argv[1]).read(), sys.argv[2]
tables = dict(re.findall(r"<!-- config-keys: ([\w.]+) -->\n(.*?\n)\n", generated, re.S))
docs = open(docs_path).read()
def replace(m):
    return m.group(1) + tables[m.group(2)]
docs, count = re.subn(r"(<!-- config-keys: ([\w.]+) -->\n)(?:\|.*\n)*", replace, docs)
if count != len(tables):
    sys.exit(f"docs/configs.md has {count} config-keys markers; the schema has {len(tables)} sections")
open(docs_path, "w").write(docs)
PY
echo "docs/configs.md: key tables rewritten"
