#!/usr/bin/env bash
# deps.sh SCOPE...: check, and install when possible, what the build and the
# tests need on Debian 12 (`make deps`; the Makefile's targets call it with
# the scopes they need). Scopes, each including the ones before it:
#
#   build  Go >= 1.26 (not packaged by Debian 12: checked, never installed),
#          gcc and g++ (cgo: DuckDB's bindings link a C++ static library),
#          git and ca-certificates (module downloads)
#   round  build + bubblewrap (the sandbox that runs environment code)
#   test   round + chromium and fonts-dejavu-core (the report's browser
#          test and its screenshot), python3 and
#          python3-venv (the sandbox's interpreter, `make venv`),
#          python3-numpy (tests that run Debian's /usr/bin/python3; the
#          trainer runs from the pinned venv, requirements.txt)
#
# When every package is there it prints nothing and costs one dpkg-query.
# When some are missing it installs them with apt-get if it runs as root
# and SPADE_NO_APT is unset; otherwise it stops with one line naming what
# is missing and the command that installs it. Exit 0 ready, 1 missing.
set -euo pipefail

GO_MIN_MINOR=26
want=()
for scope in "$@"; do
  case "$scope" in
    build) want+=(gcc g++ git ca-certificates) ;;
    round) want+=(gcc g++ git ca-certificates bubblewrap) ;;
    test) want+=(gcc g++ git ca-certificates bubblewrap chromium fonts-dejavu-core python3 python3-venv python3-numpy) ;;
    *) echo "deps.sh: unknown scope $scope (want build, round or test)" >&2; exit 2 ;;
  esac
done

# Go first: the one thing apt cannot give.
gov=$(go env GOVERSION 2>/dev/null || true)
minor=$(sed -nE 's/^go1\.([0-9]+).*/\1/p' <<<"$gov")
if [ -z "$minor" ] || [ "$minor" -lt "$GO_MIN_MINOR" ]; then
  echo "spade: Go 1.$GO_MIN_MINOR or later is needed (found: ${gov:-no go on PATH}); Debian 12 does not package it: unpack the Go project's release archive for linux (https://go.dev/dl/) into /usr/local and put /usr/local/go/bin on PATH" >&2
  exit 1
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  exit 0 # not Debian: nothing to check by package name; the build says what it lacks
fi
missing=()
declare -A seen=()
for p in "${want[@]}"; do
  [ -n "${seen[$p]:-}" ] && continue
  seen[$p]=1
  if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" != installed ]; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || [ -n "${SPADE_NO_APT:-}" ] || ! command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo "
  echo "spade: missing Debian packages: ${missing[*]}; install them with: ${sudo}apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
start=$SECONDS
# Another apt run (a parallel job, unattended-upgrades) holds the lock for a
# while at most: wait for it rather than fail.
apt-get -o DPkg::Lock::Timeout=300 update -qq
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "deps: installed ${missing[*]} in $((SECONDS - start)) s"
