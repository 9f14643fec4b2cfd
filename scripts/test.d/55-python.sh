# The Python bindings (`import airlock`): the pytest suite in bindings/python/tests against the
# module built in $AIRLOCK_BUILD_DIR/python, with Debian's interpreter and pytest (the machine's
# PATH may lead to another CPython that has neither). Fast unit checks run on the in-process
# `testing` backend (`import airlock.testing`, an extension of its own built with the tests); the
# rest attack real `linux` sandboxes (root only), kept in a private state directory that the
# suite purges and removes however it ends.
#
# Then the wheel: built from the tree (bindings/python/pyproject.toml, scikit-build-core, in
# $AIRLOCK_WHEEL_BUILD_DIR, default build/wheel, so a rerun is incremental), pip-installed
# offline into a fresh venv and smoke-tested there from outside the tree (the quick start
# against the real linux backend as root); its stubs checked against it by stubtest, and a typed
# usage file by `mypy --strict`.
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

# ---- the wheel --------------------------------------------------------------------------------

cd "$AIRLOCK_SOURCE_DIR"
if ! "$python" -c "import build, scikit_build_core, venv, mypy.stubtest" 2>/dev/null; then
  skip_part "the wheel part: $python lacks python3-build, python3-scikit-build-core (bookworm-backports), python3-venv or python3-mypy (scripts/bootstrap --test installs them)"
  exit 0
fi
version=$(sed -n 's/^project(airlock VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[[ -n $version ]] || fail "no project version in CMakeLists.txt"
wheel_build=$(realpath -m "${AIRLOCK_WHEEL_BUILD_DIR:-$AIRLOCK_SOURCE_DIR/build/wheel}")
scratch=$(mktemp -d /tmp/airlock-wheel-XXXXXX)
remove_on_exit "$scratch"

begin
mkdir -p "$wheel_build"
if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$python" -m build --wheel \
    --no-isolation -C build-dir="$wheel_build/cmake" -o "$scratch/dist" bindings/python \
    >"$scratch/build.log" 2>&1; then
  tail -n 60 "$scratch/build.log" >&2
  fail "the wheel did not build (python3 -m build --wheel --no-isolation bindings/python)"
fi
wheels=("$scratch"/dist/airlock-"$version"-*.whl)
[[ ${#wheels[@]} -eq 1 ]] || fail "expected one airlock-$version wheel in $scratch/dist, found: $(ls "$scratch/dist")"
wheel=${wheels[0]}
took "the wheel ($(basename "$wheel"), $(du -k "$wheel" | cut -f1) KiB)"

# What it carries: the package, the stubs and marker, the extension with libairlock and the
# helpers beside it — and nothing of the tests.
listing=$("$python" -m zipfile -l "$wheel" | awk 'NR > 1 {print $1}')
for member in airlock/__init__.py airlock/__init__.pyi airlock/_airlock.pyi airlock/py.typed \
              airlock/airlock-init airlock/airlock-gvisor-guest airlock/airlock-isolation-probe; do
  grep -qx "$member" <<<"$listing" || fail "the wheel lacks $member"
done
grep -q '^airlock/_airlock\..*\.so$' <<<"$listing" || fail "the wheel lacks the extension"
grep -q '^airlock/libairlock\.so\.' <<<"$listing" || fail "the wheel lacks libairlock"
if grep -E '(^|/)(testing\.py|_airlock_testing[^/]*|__pycache__/.*)$' <<<"$listing"; then
  fail "the wheel carries test-only files (above)"
fi

begin
venv="$scratch/venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --no-index --disable-pip-version-check "$wheel" ||
  fail "pip install --no-index $(basename "$wheel") into a fresh venv failed"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
took "a fresh venv with the wheel"

begin
smoke=("$version" "$site")
if is_root; then
  [[ -x $airlock ]] || fail "the CLI $airlock is not built: it checks what the smoke test leaves"
  linux_backend_config airlock-python-wheel
  smoke+=("$state")
else
  skip_part "the wheel's quick start against the linux backend: needs root (CI runs as root)"
fi
cp bindings/python/tests/wheel_smoke.py "$scratch/"
(cd "$scratch" && "$venv/bin/python" -I wheel_smoke.py "${smoke[@]}") ||
  fail "the installed wheel failed its smoke test (bindings/python/tests/wheel_smoke.py)"
if is_root; then
  left=$("$airlock" ls --backend linux --backend-config "$config" --json)
  [[ $(tr -d '[:space:]' <<<"$left") == "[]" ]] ||
    fail "the wheel's smoke test left a sandbox in its state directory: $left"
fi
took "the wheel's smoke test"

# The stubs against the installed module (stubtest imports it, so it runs with the venv's
# packages on the path and the system's mypy; an unused allowlist line is an error too), the
# stubs alone under --strict, then a typed usage file under --strict against the installed wheel.
begin
cd "$scratch"
PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 "$python" -m mypy.stubtest airlock \
  --allowlist "$AIRLOCK_SOURCE_DIR/bindings/python/stubtest-allowlist.txt" ||
  fail "stubtest: the stubs in bindings/python/airlock/*.pyi do not match the built module"
mkdir -p "$scratch/stubs/airlock"
cp "$AIRLOCK_SOURCE_DIR"/bindings/python/airlock/*.pyi "$scratch/stubs/airlock/"
(cd "$scratch/stubs" && "$python" -m mypy --strict --cache-dir "$scratch/mypy-cache" -p airlock) ||
  fail "mypy --strict rejects the stubs themselves (bindings/python/airlock/*.pyi)"
"$python" -m mypy --strict --cache-dir "$scratch/mypy-cache" --python-executable "$venv/bin/python" \
  "$AIRLOCK_SOURCE_DIR/bindings/python/tests/typed_usage.py" ||
  fail "mypy --strict rejects bindings/python/tests/typed_usage.py against the installed stubs"
took "stubtest and mypy --strict"
