#!/usr/bin/env bash
# Downloads the Tiny Shakespeare corpus (nanoGPT's shakespeare_char reference text, about 1 MB) to
# data/tinyshakespeare.txt, for users of the character-level text task. Not used by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
mkdir -p data
if [ -s data/tinyshakespeare.txt ]; then
  echo "data/tinyshakespeare.txt is already here"
  exit 0
fi
# A developer checkout has a copy beside the project (../shared/data); use it instead of the network.
if [ -s ../shared/data/tinyshakespeare.txt ]; then
  cp ../shared/data/tinyshakespeare.txt data/tinyshakespeare.txt
  echo "copied ../shared/data/tinyshakespeare.txt to data/tinyshakespeare.txt"
  exit 0
fi
tmp=$(mktemp data/.tinyshakespeare.XXXXXX)
trap 'rm -f "$tmp"' EXIT
if command -v curl >/dev/null 2>&1; then
  curl -fsSL "$url" -o "$tmp"
elif command -v wget >/dev/null 2>&1; then
  wget -q "$url" -O "$tmp"
else
  echo "get_data: needs curl or wget (apt-get install curl)" >&2
  exit 1
fi
mv "$tmp" data/tinyshakespeare.txt
trap - EXIT
echo "saved data/tinyshakespeare.txt ($(wc -c < data/tinyshakespeare.txt) bytes)"
