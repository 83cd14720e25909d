#!/usr/bin/env bash
# Make sure Debian's chromium is at /usr/bin/chromium for the dashboard's browser tests
# (issue 18; Playwright drives it, `playwright install` is never run).
#
# A no-op when it is there, or when TASKLOOM_CHROMIUM names another binary. Otherwise, on
# a Debian machine where this runs as root, it installs the `chromium` package. It never
# fails: without a browser (not root, no apt, the package registry out of reach) the
# browser tests skip, saying why.
set -uo pipefail

BINARY="${TASKLOOM_CHROMIUM:-/usr/bin/chromium}"

say() {
    echo "ensure-chromium: $*" >&2
}

if [[ -x "$BINARY" ]]; then
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    say "no Chromium at $BINARY, and this is not a Debian machine where I am root;"
    say "the browser tests will skip (install chromium, or set TASKLOOM_CHROMIUM)"
    exit 0
fi
say "installing Chromium from the Debian packages"
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }; then
    say "could not install chromium (is the package registry reachable?);"
    say "the browser tests will skip"
fi
exit 0
