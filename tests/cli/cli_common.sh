#!/usr/bin/env bash
# The CLI's shared habits, through the built binary:
#
#   cli_common.sh CASE AIRLOCK SOURCE_DIR
#
#   global_options  --json and --log-level before or after the command, for every command
#   unknown         an unknown option, command or argument is named (with the nearest known
#                   option), and nothing runs
#   json_errors     every command's error under --json is {"error": {"type", "message", …}}
#   floor           the floor: flags > AIRLOCK_MIN_ISOLATION > the config file > microvm, and
#                   the default floor's refusal names every way to lower it
#   docs            docs/cli.md names every command and every option --help lists
#   completion_bash bash completion, generated from the command tree, driven through COMP_WORDS
#   completion_zsh  the same for zsh, with compadd and _files stubbed (SKIPPED when zsh is not
#                   installed)
#
# Each case runs with a private state directory and config file, so nothing of this host's
# settings or sandboxes is read or touched.
set -uo pipefail
case=$1
airlock=$2
source_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AIRLOCK_STATE_DIR="$work/state"
export AIRLOCK_CONFIG="$work/config.json"
echo '{}' >"$AIRLOCK_CONFIG"
unset AIRLOCK_MIN_ISOLATION
spec=$source_dir/examples/specs/codeact.json
status=0
fail() {
  echo "FAILED: $1"
  [[ -n ${2:-} ]] && sed 's/^/  /' <<<"$2"
  status=1
}
ok() { echo "ok  $1"; }
# json_field JSON PYTHON-EXPRESSION-ON-d: prints the value, fails (exit 1) when it is not there
json_field() {
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2" 2>/dev/null
}
# run_airlock ARGS…: sets $out (stdout), $err (stderr) and $code
run_airlock() {
  out=$("$airlock" "$@" 2>"$work/stderr")
  code=$?
  err=$(cat "$work/stderr")
}

# subcommands_of WORDS…: the commands `airlock WORDS… --help` lists under its Subcommands
# heading (CLI11 spells it in any case), one a line.
subcommands_of() {
  "$airlock" "$@" --help | awk 'tolower($0) ~ /^subcommands:/ { on = 1; next }
                                on && /^[^ ]/ { on = 0 }
                                on && NF { print $1 }'
}
# The root must list some: a heading this script cannot read would make every loop below vacuous.
all_commands=$(subcommands_of)
if (($(wc -w <<<"$all_commands") < 8)); then
  echo "FAILED: airlock --help lists too few subcommands for this test to read: $all_commands"
  exit 1
fi

case $case in
global_options)
  # Before and after the command, for a command that routes, one that reads state, and a nested one.
  for words in "ls" "image ls" "check --spec $spec --min-isolation container"; do
    # shellcheck disable=SC2086
    run_airlock --json $words
    before=$out
    # shellcheck disable=SC2086
    run_airlock $words --json
    if ((code != 0)) || ! python3 -c 'import json, sys; json.loads(sys.argv[1])' "$out" 2>/dev/null; then
      fail "airlock $words --json (exit $code) did not print JSON" "$out$err"
    elif [[ "$(json_field "$before" 'sorted(d) if isinstance(d, dict) else type(d).__name__')" != \
            "$(json_field "$out" 'sorted(d) if isinstance(d, dict) else type(d).__name__')" ]]; then
      fail "airlock --json $words and airlock $words --json differ" "$before"$'\n'"$out"
    else
      ok "airlock $words --json is airlock --json $words"
    fi
  done
  run_airlock ls --log-level debug
  ((code == 0)) || fail "airlock ls --log-level debug exited $code" "$err"
  run_airlock image ls --log-level loud
  if ((code != 125)) || ! grep -q -- "--log-level" <<<"$err"; then
    fail "an unknown log level was not refused naming --log-level (exit $code)" "$err"
  else
    ok "--log-level after the command, and a bad level refused by name"
  fi
  # Every command takes them (bench hands its words to airlock-bench, which has its own).
  for command in $(subcommands_of); do
    [[ $command == bench ]] && continue
    sub_help=$("$airlock" "$command" --help)
    if ! grep -q -- '--json' <<<"$sub_help" || ! grep -q -- '--log-level' <<<"$sub_help"; then
      fail "airlock $command --help lists no --json / --log-level" "$sub_help"
    fi
  done
  ok "every command's help lists --json and --log-level"
  ;;

unknown)
  # The case of the issue: a misspelt option before the command's words.
  run_airlock run --min-isolaton container -- echo hi
  if ((code != 125)); then
    fail "run --min-isolaton exited $code, not 125" "$out$err"
  elif ! grep -qF "unknown option '--min-isolaton'" <<<"$err" ||
       ! grep -qF "did you mean --min-isolation?" <<<"$err"; then
    fail "run --min-isolaton was not named with its nearest option" "$err"
  elif grep -q hi <<<"$out" || grep -q "arguments were not expected" <<<"$err"; then
    fail "run --min-isolaton ran the command or kept CLI11's message" "$out$err"
  else
    ok "run --min-isolaton: $(head -1 <<<"$err")"
  fi
  run_airlock run --min-isolaton=container -- echo hi
  grep -qF "unknown option '--min-isolaton'" <<<"$err" || fail "--min-isolaton=VALUE not named" "$err"
  # Every command, nested ones and the root too.
  expect() {  # expect DESCRIPTION NEEDLE ARGS…
    local what=$1 needle=$2
    shift 2
    run_airlock "$@"
    if ((code != 125)) || ! grep -qF -- "$needle" <<<"$err"; then
      fail "$what (exit $code)" "$err"
    else
      ok "$what: $(head -1 <<<"$err")"
    fi
  }
  expect "ls --bakend" "unknown option '--bakend' for 'airlock ls'; did you mean --backend?" ls --bakend linux
  expect "image ls --stor" "did you mean --store?" image ls --stor /x
  expect "purge --al" "did you mean --all?" purge --al
  expect "--jsn before the command" "unknown option '--jsn' for 'airlock'; did you mean --json?" --jsn ls
  expect "a far-off option" "unknown option '--frobnicate' for 'airlock check'; see airlock check --help" \
    check --frobnicate
  expect "a misspelt command" "unknown command 'lss' for 'airlock'; did you mean ls?" lss
  expect "a misspelt nested command" "unknown command 'improt' for 'airlock image'; did you mean import?" \
    image improt x
  expect "a stray argument" "unexpected argument 'extra' for 'airlock ls'" ls extra
  expect "a command that needs one" "'airlock image' needs a command:" image
  # Nothing was started by any of them.
  run_airlock --json ls
  [[ $out == "[]" ]] || fail "a refused command left a sandbox" "$out"
  ;;

json_errors)
  # One shape for every kind of failure: a usage error, a refusal, a bad file, a command's own.
  check_shape() {  # check_shape DESCRIPTION TYPE ARGS…
    local what=$1 type=$2
    shift 2
    run_airlock "$@"
    local got
    if ((code == 0)); then
      fail "$what succeeded" "$out"
    elif ! got=$(json_field "$out" 'd["error"]["type"] + "|" + d["error"]["message"]'); then
      fail "$what: stdout is not {\"error\": {\"type\", \"message\"}}" "$out"
    elif [[ ${got%%|*} != "$type" ]]; then
      fail "$what: error type ${got%%|*}, not $type" "$out"
    elif (($(wc -l <<<"$out") != 1)); then
      fail "$what: more than one document on stdout" "$out"
    else
      ok "$what: {\"error\": {\"type\": \"${got%%|*}\", …}}"
    fi
  }
  check_shape "an unknown option" InvalidArgument --json run --min-isolaton container -- true
  check_shape "an unknown option, --json after" InvalidArgument run --json --bogus -- true
  check_shape "a missing required option" InvalidArgument check --json
  check_shape "a conversion error" InvalidArgument run --json --timeout soon -- true
  check_shape "an unreadable spec" InvalidArgument check --json --spec "$work/absent.json"
  check_shape "the floor (run)" SandboxBackendNotPermitted run --json -- true
  check_shape "the floor (codeact)" SandboxBackendNotPermitted codeact --json \
    "$source_dir/examples/jobs/codeact_job.py"
  check_shape "conformance without a backend" InvalidArgument conformance --json
  check_shape "an unknown suite" InvalidArgument conformance --json --backend linux --suite nope
  check_shape "an unknown image" InvalidArgument image inspect --json nothing-here
  check_shape "purge without a target" InvalidArgument purge --json
  run_airlock run --json -- true
  hint=$(json_field "$out" 'd["error"]["hint"]') || true
  [[ $hint == *"--min-isolation container"* ]] || fail "the floor error carries no hint" "$out"
  # check answers a refusal as a decision, with the error in the same shape beside it.
  run_airlock check --json --spec "$spec"
  if ((code != 125)) || [[ $(json_field "$out" 'd["accepted"], d["error"]["type"], d["error"]["check"]') != \
       "(False, 'SandboxBackendNotPermitted', 'isolation-floor')" ]]; then
    fail "check's refusal is not {\"accepted\": false, \"error\": {…}}" "$out"
  else
    ok "check's refusal: {\"accepted\": false, \"error\": {…}}"
  fi
  ;;

floor)
  floor_of() {  # prints the effective floor check decided on, or REFUSED:<check>
    local document
    document=$("$airlock" check --json --spec "$spec" "$@" 2>/dev/null)
    json_field "$document" 'd["decision"]["effective_floor"] if d["accepted"] else "REFUSED:" + d["error"]["check"]'
  }
  expect_floor() {  # expect_floor DESCRIPTION WANT [ENV=VALUE…] -- ARGS…
    local what=$1 want=$2 got
    shift 2
    local -a environment=()
    while (($#)) && [[ $1 != -- ]]; do environment+=("$1"); shift; done
    shift
    got=$(env "${environment[@]}" bash -c "$(declare -f floor_of json_field); airlock=$airlock spec=$spec floor_of \"\$@\"" _ "$@")
    if [[ $got != "$want" ]]; then
      fail "$what: floor $got, not $want"
    else
      ok "$what: $want"
    fi
  }
  printf '{"min_isolation": "os_process"}\n' >"$work/file.json"
  expect_floor "the default" REFUSED:isolation-floor --
  expect_floor "the file" os_process "AIRLOCK_CONFIG=$work/file.json" --
  expect_floor "the environment" container AIRLOCK_MIN_ISOLATION=container --
  expect_floor "the environment over the file" container AIRLOCK_MIN_ISOLATION=container \
    "AIRLOCK_CONFIG=$work/file.json" --
  expect_floor "the flag over the environment" os_process AIRLOCK_MIN_ISOLATION=container -- \
    --min-isolation os_process
  expect_floor "the flag over the file" container "AIRLOCK_CONFIG=$work/file.json" -- \
    --min-isolation container
  expect_floor "the environment raising the floor" REFUSED:isolation-floor \
    AIRLOCK_MIN_ISOLATION=microvm "AIRLOCK_CONFIG=$work/file.json" --
  # The default refusal names every way to lower it.
  run_airlock run -- true
  for needle in "--min-isolation container" "AIRLOCK_MIN_ISOLATION=container" \
    "\"min_isolation\": \"container\" in $AIRLOCK_CONFIG"; do
    grep -qF -- "$needle" <<<"$err" || fail "the floor refusal does not name $needle" "$err"
  done
  ((code == 125)) && ok "the default floor's refusal names the flag, the variable and the file"
  # Bad values are refused naming where they came from.
  err=$(AIRLOCK_MIN_ISOLATION=contaner "$airlock" check --spec "$spec" 2>&1)
  grep -q "AIRLOCK_MIN_ISOLATION" <<<"$err" || fail "a bad AIRLOCK_MIN_ISOLATION is not named" "$err"
  printf '{"min_isolaton": "container"}\n' >"$work/typo.json"
  err=$(AIRLOCK_CONFIG=$work/typo.json "$airlock" check --spec "$spec" 2>&1)
  grep -qF "unknown key \"min_isolaton\"" <<<"$err" || fail "an unknown config key is not named" "$err"
  err=$(AIRLOCK_CONFIG=$work/absent.json "$airlock" check --spec "$spec" 2>&1)
  grep -qF "$work/absent.json" <<<"$err" || fail "a missing \$AIRLOCK_CONFIG is not named" "$err"
  # The file's backend settings reach the backends (an unknown linux key is refused by name).
  printf '{"min_isolation": "container", "backend": "linux", "backend_config": {"linux": {"no_such_key": 1}}}\n' \
    >"$work/backend.json"
  err=$(AIRLOCK_CONFIG=$work/backend.json "$airlock" ls 2>&1)
  grep -q "no_such_key" <<<"$err" || fail "the config file's backend_config was not applied" "$err"
  ok "bad values are refused naming the variable, the key or the file"
  ;;

completion_bash)
  script="$work/airlock.bash"
  "$airlock" completion bash >"$script" || fail "airlock completion bash exited $?"
  complete_bash() {  # complete_bash WORD… (the last one is being completed): prints COMPREPLY
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _airlock; printf "%s\n" "${COMPREPLY[@]}"' \
      _ "$script" "$@"
  }
  expect_bash() {  # expect_bash WANT WORD…
    local want=$1
    shift
    local got
    got=$(complete_bash "$@")
    if grep -qxF -- "$want" <<<"$got"; then
      ok "bash: airlock ${*} ⇥ offers $want"
    else
      fail "bash: airlock ${*} ⇥ does not offer $want" "$got"
    fi
  }
  expect_bash run airlock ru
  expect_bash --min-isolation airlock run --min-i
  expect_bash container airlock run --min-isolation con
  expect_bash build airlock image b
  expect_bash --store airlock image build busybox --st
  expect_bash --backend airlock ls --json --back
  expect_bash docker airlock conformance --backend do
  # A value is not taken for a command; after --, the guest's words complete as files.
  touch "$work/guest-file"
  expect_bash "$work/guest-file" airlock run --scope ls -- "$work/guest-f"
  got=$(complete_bash airlock run --scope "")
  grep -qx run <<<"$got" && fail "a value position offered commands" "$got"
  # Every command of airlock --help is offered.
  got=$(complete_bash airlock "")
  for command in $(subcommands_of); do
    grep -qx "$command" <<<"$got" || fail "bash: the command $command is not offered" "$got"
  done
  ;;

completion_zsh)
  if ! command -v zsh >/dev/null; then
    echo "SKIPPED zsh completion: zsh is not installed (apt-get install zsh; scripts/bootstrap --test installs it)"
  else
    "$airlock" completion zsh >"$work/_airlock" || fail "airlock completion zsh exited $?"
    complete_zsh() {
      zsh -f -c '
        compadd() { [[ $1 == -- ]] && shift; print -l -- "$@"; }
        _files() { print -- "<files>"; }
        compdef() { :; }
        source "$1"; shift
        words=("$@"); CURRENT=$#
        _airlock' _ "$work/_airlock" "$@"
    }
    for probe in "run|airlock ru" "--min-isolation|airlock run --min-i" \
      "container|airlock run --min-isolation con" "build|airlock image b" \
      "--backend|airlock ls --json --back" "<files>|airlock run -- x"; do
      want=${probe%%|*}
      # shellcheck disable=SC2086
      got=$(complete_zsh ${probe#*|})
      if grep -qxF -- "$want" <<<"$got"; then
        ok "zsh: ${probe#*|} ⇥ offers $want"
      else
        fail "zsh: ${probe#*|} ⇥ does not offer $want" "$got"
      fi
    done
  fi
  ;;
docs)
  # docs/cli.md names every option of every command (bench's are airlock-bench's).
  doc=$source_dir/docs/cli.md
  commands=$(subcommands_of)
  paths=""
  for command in $commands; do
    [[ $command == bench ]] && continue
    paths+="$command"$'\n'
    for sub in $(subcommands_of "$command"); do
      paths+="$command $sub"$'\n'
    done
  done
  missing=""
  while IFS= read -r path; do
    [[ -n $path ]] || continue
    # shellcheck disable=SC2086
    for option in $("$airlock" $path --help | grep -oE '^ +(-[A-Za-z], ?)?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z0-9-]+'); do
      [[ $option == --help ]] && continue
      grep -qF -- "\`$option" "$doc" || grep -qE -- "[ (\[]$option[] =\`]" "$doc" || missing+="airlock $path $option"$'\n'
    done
  done <<<"$paths"
  for command in $commands; do
    grep -q "^### $command\$" "$doc" || missing+="the section ### $command"$'\n'
  done
  if [[ -n $missing ]]; then
    fail "docs/cli.md does not name:" "$missing"
  else
    ok "docs/cli.md names every command and every option"
  fi
  ;;
*)
  echo "cli_common.sh: unknown case '$case'" >&2
  exit 2
  ;;
esac
exit $status
