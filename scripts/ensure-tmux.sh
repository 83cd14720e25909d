#!/usr/bin/env bash
# Make sure tmux is installed for the terminal tests (tests/cli/test_terminal.py).
#
# A no-op when tmux is there. Otherwise, on a Debian machine where we are root, installs
# Debian's tmux package. Elsewhere it says why and exits 0: those tests then skip, naming
# the reason.
set -euo pipefail

say() {
    echo "ensure-tmux: $*" >&2
}

if command -v tmux >/dev/null; then
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    say "no tmux, and this is not a Debian machine where I am root: the terminal tests skip"
    exit 0
fi
say "installing tmux from the Debian packages"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -qq tmux >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq tmux >/dev/null || say "could not install tmux"
fi
