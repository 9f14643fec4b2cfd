# Last: whatever the stages before left on this host — processes of our binaries, cgroups under
# airlock's subtrees, mounts under state dirs and airlock temp paths, named netns, sandbox and
# standby records — fails the run, listed.
# shellcheck source=scripts/test.d/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
exec scripts/leak-audit
