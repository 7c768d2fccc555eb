#!/usr/bin/env bash
# Runs docs/python.md's walk-through as its page gives it (the blocks marked `walkthrough`, taken out by
# tests/docs/extract_blocks.cmake), in a fresh folder that sees the repository's configs as its root
# would. Usage: run_walkthrough.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 source=$2
script=$build/tests/docs/python_walkthrough.py
mkdir -p "$(dirname "$script")"
cmake -DDOC="$source/docs/python.md" -DLANG=python -DMARK=walkthrough -DOUT="$script" -P "$source/tests/docs/extract_blocks.cmake"
source "$source/tests/python/module_env.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ln -s "$source/configs" "$work/configs"
cd "$work"
/usr/bin/python3 "$script"
[ -s runs/walkthrough/walkthrough.png ] || { echo "the walk-through drew no figure"; exit 1; }
