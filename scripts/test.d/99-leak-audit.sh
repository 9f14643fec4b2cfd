# Last: whatever the stages before left on this host — processes of our binaries, cgroups under
# airlock's subtrees, mounts under state dirs and airlock temp paths, named netns, sandbox and
# standby records — fails the run, listed.
set -euo pipefail
cd "$AIRLOCK_SOURCE_DIR"
exec scripts/leak-audit
