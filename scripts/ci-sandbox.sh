#!/usr/bin/env bash
# Prepare this Debian machine for Plinth's bubblewrap sandbox (CI and operators):
#   - bubblewrap (and util-linux's setpriv/prlimit, procps' ps) from Debian's packages
#   - the unprivileged user sandboxed programs run as when the server runs as root
#
#   bash scripts/ci-sandbox.sh [user]      (default user: plinth-sandbox)
#
# Idempotent; must run as root. All output goes to stderr.
set -euo pipefail

SANDBOX_USER=${1:-${PLINTH_SANDBOX_USER:-plinth-sandbox}}

log() { printf '[ci-sandbox] %s\n' "$*" >&2; }

[ "$(id -u)" -eq 0 ] || { log "ERROR: must run as root"; exit 1; }

missing=()
for package in bubblewrap util-linux procps; do
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)" = installed ] || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

if ! getent passwd "$SANDBOX_USER" >/dev/null; then
    log "creating the sandbox user $SANDBOX_USER"
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$SANDBOX_USER"
fi

log "$(bwrap --version) ready; sandboxed programs run as $SANDBOX_USER ($(id -u "$SANDBOX_USER"))"
