#!/usr/bin/env bash
# The shipped programs carry no testing backend: in none of the files given is there a symbol of
# the in-process fake (its namespace, its classes) or the text it registers itself with.
#
#   no_testing_backend.sh CONTROL FILE...
#
# CONTROL is a test program that links the fake: the same search must find it there, or the
# search itself is broken and a clean result would prove nothing. A FILE whose symbol table
# names nothing of airlock at all (stripped) cannot be judged, and fails.
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 CONTROL FILE..." >&2; exit 2; }
control=$1
shift
symbols='airlock::testing::|InProcessSandbox'
registration='in-process fake with overridable declarations'

table() { nm -C "$1" 2>/dev/null; nm -DC "$1" 2>/dev/null; }

status=0
# Listings are held whole before they are searched: `grep -q` stopping early would fail the
# pipeline (SIGPIPE) under pipefail.
control_listing=$(table "$control")
if ! grep -Eq "$symbols" <<<"$control_listing"; then
  echo "FAILED: the control $control shows no testing-backend symbol: the search finds nothing"
  status=1
fi
if ! grep -aqF "$registration" "$control"; then
  echo "FAILED: the control $control does not hold the registration text: the search finds nothing"
  status=1
fi

for file in "$@"; do
  if [[ ! -f $file ]]; then
    echo "FAILED: $file does not exist"
    status=1
    continue
  fi
  listing=$(table "$file")
  if ! grep -q 'airlock::' <<<"$listing"; then
    echo "FAILED: $file names no airlock symbol (stripped?): it cannot be judged"
    status=1
    continue
  fi
  found=$(grep -E "$symbols" <<<"$listing" | sort -u)
  if [[ -n $found ]]; then
    echo "FAILED: $file carries the testing backend:"
    head -20 <<<"$found" | sed 's/^/  /'
    status=1
  elif grep -aqF "$registration" "$file"; then
    echo "FAILED: $file holds the testing backend's registration text"
    status=1
  else
    echo "ok  $file: no testing-backend symbol, no registration"
  fi
done
exit $status
