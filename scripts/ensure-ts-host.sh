#!/usr/bin/env bash
# Make sure the TypeScript MCP SDK is installed for the tests that play a TypeScript-SDK
# host (tests/e2e/test_ts_host.py): MCP Inspector, Cursor and Claude Desktop call tools
# through its client, with its 60 s request timeout.
#
# A no-op when .ts-host/ matches tests/ts_host/package-lock.json. Otherwise installs it
# with `npm ci` from that lock file (the npm registry, once). Without Node or npm, or
# without the registry, it says why and exits 0: those tests then skip, naming the reason.
set -euo pipefail

say() {
    echo "ensure-ts-host: $*" >&2
}

here="$(cd "$(dirname "$0")/.." && pwd)"
target="${TS_HOST_DIR:-$here/.ts-host}"
lock="$here/tests/ts_host/package-lock.json"

if [[ -f "$target/package-lock.json" ]] && cmp -s "$lock" "$target/package-lock.json" \
    && [[ -d "$target/node_modules/@modelcontextprotocol/sdk" ]]; then
    exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    say "no node or npm: the TypeScript-host tests skip"
    exit 0
fi
mkdir -p "$target"
cp "$here/tests/ts_host/package.json" "$lock" "$target/"
if ! (cd "$target" && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
    rm -rf "$target/node_modules"
    say "could not install the TypeScript MCP SDK from the npm registry: the TypeScript-host tests skip"
fi
