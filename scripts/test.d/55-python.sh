# The Python bindings (`import airlock`): the pytest suite in bindings/python/tests against the
# module built in $AIRLOCK_BUILD_DIR/python, with Debian's interpreter and pytest (the machine's
# PATH may lead to another CPython that has neither). Fast unit checks run on the in-process
# `testing` backend (`import airlock.testing`, an extension of its own built with the tests); the
# rest attack real `linux` sandboxes (root only), kept in a private state directory that the
# suite purges and removes however it ends.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
python=/usr/bin/python3
package="$AIRLOCK_BUILD_DIR/python/airlock"

if ! compgen -G "$package/_airlock*.so" >/dev/null; then
  if ! dpkg-query -W -f='${Status}' pybind11-dev 2>/dev/null | grep -q "install ok installed"; then
    skip "the Python module was not built: pybind11-dev is not installed (scripts/bootstrap installs it)"
  fi
  fail "pybind11-dev is installed but $package/_airlock*.so was not built"
fi
"$python" -c "import pytest, pytest_asyncio" 2>/dev/null ||
  fail "$python lacks pytest or pytest-asyncio (scripts/bootstrap --test installs them)"
is_root || skip_part "the Python suite's linux-backend tests: need root (CI runs as root); pytest counts them as skipped below"

shopt -s nullglob
leftovers() { local dirs=(/tmp/airlock-python-linux-*); echo "${#dirs[@]}"; }
before=$(leftovers)
cd "$AIRLOCK_SOURCE_DIR/bindings/python/tests"
PYTHONPATH="$AIRLOCK_BUILD_DIR/python" \
  PYTHONDONTWRITEBYTECODE=1 timeout --signal=INT --kill-after=30 300 \
  "$python" -X faulthandler -m pytest -q -p no:cacheprovider .

# The suite cleans up after itself: no state directory of its own may survive it.
after=$(leftovers)
((after <= before)) || fail "the Python suite left a linux state directory behind in /tmp"
