#!/usr/bin/env bash
# Checks that the C and C++ files under src/, include/, tests/, plugins/, bench/ and fuzz/ are
# formatted as .clang-format says (clang-format from Debian's clang-format package:
# scripts/install-deps.sh). Changes nothing; exits 1 and lists the files that differ, with
# clang-format's notes on each. Fix a file with `clang-format -i FILE`.
#
# Usage: scripts/check-format.sh [FILE...]   (no files: the whole tree)
set -euo pipefail

cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "check-format: $CLANG_FORMAT not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- src include tests plugins bench fuzz |
                         grep -E '\.(c|cc|cpp|h|hh|hpp)$')
fi

notes=$(mktemp)
trap 'rm -f "$notes"' EXIT
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror --style=file "$f" 2>"$notes"; then
    bad+=("$f")
    head -n 20 "$notes" >&2
  fi
done

if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files are not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
