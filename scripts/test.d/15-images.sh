# The image store beyond ctest: builds the offline test images (cached between runs), runs the
# tests that import them, and drives `airlock image` end to end against a scratch store.
# Stage 10 already ran the unit tests; the test-images ones skipped there for want of images.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
work=$(mktemp -d /tmp/airlock-stage-images.XXXXXX)
remove_on_exit "$work"

# busybox.tar and busybox-oci take seconds; python.tar (debootstrap) about two minutes the first
# time on a machine, then comes from the cache. As non-root build-test-images skips python.tar
# (and succeeds); the tests that need it then skip too, which is said here.
scripts/build-test-images --out "$work/images"
[[ -e $work/images/python.tar ]] ||
  skip_part "the python image's tests (ctest -L test-images): python.tar was not built (debootstrap needs root)"

AIRLOCK_TEST_IMAGES="$work/images" \
  ctest --test-dir "$AIRLOCK_TEST_BUILD_DIR" -L test-images --output-on-failure --timeout 600

store="$work/store"

"$airlock" image import --store "$store" "$work/images/busybox.tar" > "$work/import.txt"
grep -q '^imported busybox:latest (sha256:' "$work/import.txt" || fail "import said: $(cat "$work/import.txt")"
"$airlock" image import --store "$store" --name busybox:oci --tag latest "$work/images/busybox-oci" \
  > /dev/null
"$airlock" --json image ls --store "$store" > "$work/ls.json"
python3 - "$work/ls.json" <<'PY'
import json, sys
listing = json.load(open(sys.argv[1]))
images = {image["reference"]: image for image in listing["images"]}
assert set(images) == {"busybox:latest", "busybox:oci"}, images.keys()
assert images["busybox:latest"]["id"] == images["busybox:oci"]["id"], "tar and OCI differ"
assert images["busybox:oci"]["source_kind"] == "oci-layout"
PY
rootfs=$("$airlock" image inspect --store "$store" busybox | python3 -c 'import json,sys; print(json.load(sys.stdin)["rootfs"])')
[[ -x "$rootfs/bin/busybox" && -L "$rootfs/bin/sh" ]] || fail "the rootfs at $rootfs is incomplete"

# An unknown reference is exit 125 with the store and the way to fix it on stderr.
set +e
"$airlock" image inspect --store "$store" nosuch 2> "$work/err.txt"
rc=$?
set -e
[[ $rc == 125 ]] || fail "unknown reference exited $rc, expected 125"
grep -q "image 'nosuch:latest' is not in the image store at $store; add it with" "$work/err.txt" ||
  fail "unknown reference said: $(cat "$work/err.txt")"

"$airlock" image rm --store "$store" busybox:oci > /dev/null
"$airlock" image rm --store "$store" busybox > /dev/null
[[ -z "$(ls "$store/content")" ]] || fail "content left after removing every reference"
echo "15-images: CLI import/ls/inspect/rm passed"
