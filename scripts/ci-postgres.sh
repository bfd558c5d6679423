#!/usr/bin/env bash
# Bring up a local PostgreSQL server with pgvector for CI and development.
#
#   URL=$(bash scripts/ci-postgres.sh)
#
# Idempotent: every step checks first and is skipped when already done, so a
# rerun only makes sure the cluster is running (well under a second).
# The connection URL is the only line printed on stdout; all logging,
# including that of apt, make and psql, goes to stderr.
#
# Debian-specific (apt + postgresql-common tooling); must run as root.
# Optional overrides: PG_VERSION (default: the major version Debian's
# `postgresql` package pulls in), PGVECTOR_SUITE (Debian suite whose pgvector
# source package is built; default trixie).
set -euo pipefail

DB_USER=plinth
DB_PASS=plinth
DB_NAME=plinth
CLUSTER=main
# Debian's current stable carries pgvector 0.8.x as a source package.
PGVECTOR_SUITE=${PGVECTOR_SUITE:-trixie}

log() { printf '[ci-postgres] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# --- apt helpers ------------------------------------------------------------

APT_UPDATED=0
apt_update_once() {
    # Refresh only when we actually install something: the image's lists may
    # be stale (old versions vanish from the mirror), but a no-op rerun should
    # not touch the network.
    if [ "$APT_UPDATED" -eq 0 ]; then
        log "apt-get update"
        apt-get update -q
        APT_UPDATED=1
    fi
}

is_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

apt_install() {
    local missing=() p
    for p in "$@"; do is_installed "$p" || missing+=("$p"); done
    [ "${#missing[@]}" -eq 0 ] && return 0
    apt_update_once
    log "apt-get install ${missing[*]}"
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Print the main Debian archive's mirror URI from the machine's apt config,
# so we reuse whatever mirror this machine is set up with (no hard-coded host).
debian_mirror() {
    local codename deb822=/etc/apt/sources.list.d/debian.sources
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ -f "$deb822" ]; then
        # deb822: blank-line separated stanzas. Pick the one whose Suites has
        # the bare codename (the security stanza only has <codename>-security);
        # failing that, the first stanza that is not the security archive.
        awk -v cn="$codename" '
            BEGIN { RS = ""; FS = "\n" }
            {
                uri = ""; suites = ""; types = ""
                for (i = 1; i <= NF; i++) {
                    line = $i
                    if (line ~ /^[ \t]*#/) continue
                    if (line ~ /^URIs:/)   { sub(/^URIs:[ \t]*/, "", line);   split(line, u, /[ \t]+/); uri = u[1] }
                    if (line ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", line); suites = " " line " " }
                    if (line ~ /^Types:/)  { types = line }
                }
                if (uri == "" || types !~ /deb/) next
                if (cn != "" && index(suites, " " cn " ")) { print uri; found = 1; exit }
                if (fallback == "" && uri !~ /security/) fallback = uri
            }
            END { if (!found && fallback != "") print fallback }
        ' "$deb822"
    elif [ -f /etc/apt/sources.list ]; then
        # One-line format: deb [options] URI suite components...
        sed -E -e 's/#.*//' -e 's/\[[^]]*\]//' /etc/apt/sources.list |
            awk -v cn="$codename" '
                $1 == "deb" && $3 == cn { print $2; found = 1; exit }
                $1 == "deb" && $2 !~ /security/ && fb == "" { fb = $2 }
                END { if (!found && fb != "") print fb }
            '
    fi
}

# --- pgvector ---------------------------------------------------------------

# Download Debian's pgvector source package from $PGVECTOR_SUITE through a
# private apt "view" (own source list, lists dir and cache) so the machine's
# apt setup and package lists stay untouched, then build it with PGXS.
build_pgvector() {
    local mirror keyring work orig srcdir
    mirror=$(debian_mirror)
    [ -n "$mirror" ] || die "no Debian mirror found in the apt configuration"
    # Bookworm's archive keyring already carries the trixie signing keys.
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || keyring=
    log "fetching pgvector source ($PGVECTOR_SUITE) from $mirror"

    work=$(mktemp -d /tmp/ci-postgres.XXXXXX)
    # shellcheck disable=SC2064  # expand $work now
    trap "rm -rf '$work'" EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
    # apt downloads as the unprivileged _apt user; let it write here
    # (otherwise apt falls back to root with a warning).
    chmod 755 "$work"
    chown -R _apt "$work/lists" "$work/src" 2>/dev/null || true

    echo "deb-src ${keyring:+[signed-by=$keyring] }$mirror $PGVECTOR_SUITE main" \
        >"$work/sources.list"
    local apt_opts=(
        -o "Dir::Etc::SourceList=$work/sources.list"
        -o "Dir::Etc::SourceParts=/dev/null"
        -o "Dir::State::Lists=$work/lists"
        -o "Dir::Cache=$work/cache"
        -o "APT::Get::List-Cleanup=0"
    )
    apt-get "${apt_opts[@]}" update -q
    (cd "$work/src" && apt-get "${apt_opts[@]}" source --download-only pgvector)

    # Only the upstream tarball is needed; Debian's packaging is not used.
    orig=$(find "$work/src" -maxdepth 1 -name 'pgvector_*.orig.tar.*' | head -n1)
    [ -n "$orig" ] || die "pgvector .orig tarball was not downloaded"
    log "building $(basename "$orig")"
    tar -xf "$orig" -C "$work/src"
    srcdir=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -n1)

    # OPTFLAGS= drops pgvector's default -march=native, so the installed .so
    # cannot SIGILL if this machine image is later resumed on another CPU.
    make -C "$srcdir" -j"$(nproc)" PG_CONFIG="$PG_CONFIG" OPTFLAGS=
    make -C "$srcdir" install PG_CONFIG="$PG_CONFIG" OPTFLAGS=

    rm -rf "$work"
    trap - EXIT
}

# --- cluster helpers --------------------------------------------------------

cluster_field() { # $1 = column of `pg_lsclusters -h` (3 = port)
    pg_lsclusters -h | awk -v v="$PG_VERSION" -v c="$CLUSTER" -v f="$1" \
        '$1 == v && $2 == c { print $f }'
}

# pg_ctlcluster with every fd above 2 closed: the long-lived postmaster
# would otherwise keep any pipe our caller leaked to us (a CI runner waiting
# for EOF on it would hang).
pg_ctl_detached() {
    (
        local fd
        for fd in /proc/$BASHPID/fd/*; do
            fd=${fd##*/}
            [ "$fd" -gt 2 ] && eval "exec $fd>&-"
        done 2>/dev/null
        exec pg_ctlcluster "$PG_VERSION" "$CLUSTER" "$@" </dev/null
    )
}

# psql as the postgres OS user over the Unix socket (peer auth).
as_postgres_psql() {
    runuser -u postgres -- psql --cluster "$PG_VERSION/$CLUSTER" -X -q -v ON_ERROR_STOP=1 "$@"
}

# --- main -------------------------------------------------------------------

main() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (apt-get, pg_ctlcluster)"
    export DEBIAN_FRONTEND=noninteractive
    # The Perl postgresql-common tools warn loudly about ungenerated locales.
    export LC_ALL=C.UTF-8 LANG=C.UTF-8
    unset LANGUAGE

    # 1. Packages. `postgresql` is Debian's metapackage for the default major
    #    version; it depends on postgresql-<ver>, which tells us <ver>.
    apt_install postgresql
    if [ -z "${PG_VERSION:-}" ]; then
        PG_VERSION=$(dpkg-query -W -f='${Depends}' postgresql |
            grep -oE 'postgresql-[0-9]+' | head -n1 | cut -d- -f2)
    fi
    [ -n "$PG_VERSION" ] || die "could not detect the PostgreSQL major version"
    log "PostgreSQL major version: $PG_VERSION"
    # server-dev provides PGXS (and pulls in clang/llvm for JIT bitcode).
    apt_install "postgresql-$PG_VERSION" "postgresql-server-dev-$PG_VERSION" make gcc
    PG_CONFIG=/usr/lib/postgresql/$PG_VERSION/bin/pg_config
    [ -x "$PG_CONFIG" ] || die "$PG_CONFIG not found"

    # 2. pgvector: build once; an installed control file + library means done.
    local ext_dir lib_dir
    ext_dir="$("$PG_CONFIG" --sharedir)/extension"
    lib_dir="$("$PG_CONFIG" --pkglibdir)"
    if [ -f "$ext_dir/vector.control" ] && [ -f "$lib_dir/vector.so" ]; then
        log "pgvector already installed ($ext_dir/vector.control)"
    else
        build_pgvector
    fi

    # 3. Cluster. The server package's postinst normally creates it; this
    #    covers setups where that was disabled or the cluster was dropped.
    if [ -z "$(cluster_field 2)" ]; then
        log "creating cluster $PG_VERSION/$CLUSTER"
        pg_createcluster "$PG_VERSION" "$CLUSTER"
    fi
    local conf_dir=/etc/postgresql/$PG_VERSION/$CLUSTER port need_restart=0
    port=$(cluster_field 3)

    # Debian's defaults already listen on localhost and allow password auth
    # on 127.0.0.1; only fix configs that were edited away from that.
    if grep -qE "^[[:space:]]*listen_addresses" "$conf_dir/postgresql.conf" &&
       ! grep -qE "^[[:space:]]*listen_addresses[[:space:]]*=[[:space:]]*'(localhost|127\.0\.0\.1|\*)" "$conf_dir/postgresql.conf"; then
        log "setting listen_addresses = 'localhost'"
        echo "listen_addresses = 'localhost'" >>"$conf_dir/postgresql.conf"
        need_restart=1
    fi
    if ! grep -qE '^[[:space:]]*host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+(scram-sha-256|md5)' "$conf_dir/pg_hba.conf"; then
        log "allowing password auth from 127.0.0.1 in pg_hba.conf"
        echo "host all all 127.0.0.1/32 scram-sha-256" >>"$conf_dir/pg_hba.conf"
        need_restart=1
    fi

    # `status` exits 0 when running, 3 when stopped. A postmaster that was
    # SIGKILLed leaves a stale postmaster.pid; pg_ctl copes with it on start.
    if pg_ctlcluster "$PG_VERSION" "$CLUSTER" status >/dev/null 2>&1; then
        if [ "$need_restart" -eq 1 ]; then
            pg_ctl_detached restart
        else
            log "cluster $PG_VERSION/$CLUSTER already running on port $port"
        fi
    else
        log "starting cluster $PG_VERSION/$CLUSTER on port $port"
        pg_ctl_detached start
    fi
    local i
    for i in $(seq 1 30); do
        pg_isready -q -h 127.0.0.1 -p "$port" && break
        sleep 1
    done
    pg_isready -h 127.0.0.1 -p "$port" || die "server not accepting connections on 127.0.0.1:$port"

    # 4. Role and database. Superuser: the tests CREATE DATABASE per test
    #    file and CREATE EXTENSION vector. ALTER re-asserts a drifted password.
    as_postgres_psql -d postgres <<SQL
DO \$\$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$DB_USER') THEN
    CREATE ROLE $DB_USER LOGIN SUPERUSER CREATEDB PASSWORD '$DB_PASS';
  ELSE
    ALTER ROLE $DB_USER LOGIN SUPERUSER CREATEDB PASSWORD '$DB_PASS';
  END IF;
END
\$\$;
SELECT 'CREATE DATABASE $DB_NAME OWNER $DB_USER'
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$DB_NAME')\gexec
SQL

    # 5. Verify over TCP with the password, exactly as the test suite connects.
    URL="postgres://$DB_USER:$DB_PASS@127.0.0.1:$port/$DB_NAME"
    PGOPTIONS="-c client_min_messages=warning" psql "$URL" -X -q -v ON_ERROR_STOP=1 \
        -c "create extension if not exists vector" \
        -c "select '[1,2,3]'::vector <=> '[1,2,4]'::vector" >/dev/null ||
        die "pgvector check failed on $URL"
    log "pgvector $(psql "$URL" -X -Atc "select extversion from pg_extension where extname = 'vector'") OK" \
        "(server $(psql "$URL" -X -Atc 'show server_version'))"
}

# Run everything with stdout sent to stderr, then print only the URL.
# (Not `exec 3>&1 1>&2`: the postmaster started above would inherit fd 3 and
# `URL=$(...)` would hang until the server stops. Bash keeps the stdout saved
# around a redirected function call on a close-on-exec fd, so daemons never
# get it.)
main "$@" >&2
printf '%s\n' "$URL"
