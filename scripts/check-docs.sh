#!/usr/bin/env bash
# Generates the API reference with Doxygen (docs/Doxyfile) and fails on any warning, printing each
# one as file:line: text with the path relative to the repository, so an undocumented public
# declaration is one click away. Usage: scripts/check-docs.sh [output dir, default build/docs]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build/docs}"
mkdir -p "$out"
log="$out/doxygen-warnings.log"
rm -f "$log"
cd "$root"
status=0
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "WARN_LOGFILE = $log"; } | doxygen - || status=$?
warnings=0
if [ -s "$log" ]; then
  warnings=$(grep -c ": warning: \|: error: " "$log" || true)
fi
if [ "$status" -ne 0 ] || [ "$warnings" -ne 0 ]; then
  echo "check-docs: Doxygen reported $warnings problem(s) in the public API documentation:"
  sed "s|$root/||g" "$log"
  # Doxygen cannot place some markup errors ("<unknown>:2: ... expecting command </s>"): they come
  # from text such as Scale<s> read as an HTML tag. Point at the doc comments holding that tag.
  for tag in $(grep "^<unknown>" "$log" | grep -o "expecting command </[A-Za-z0-9]*>" | sed 's|.*</||; s|>||' | sort -u); do
    echo
    echo "check-docs: '<unknown>' lines above: <$tag> in a doc comment is read as HTML; it is in:"
    grep -rn --include='*.hpp' --include='*.h' -E "(///|//!|/\*\*).*<$tag>" include backends/cpu/include | sed 's/^/  /' || true
    echo "check-docs: wrap such code in backticks (\`Scale<s>\`) or write it without angle brackets."
  done
  echo
  echo "check-docs: document each declaration above with a /// comment (first sentence = brief);"
  echo "check-docs: internals belong in detail/ headers or a detail namespace, which are not checked."
  exit 1
fi
echo "check-docs: API reference in $out/html/index.html, no warnings"
