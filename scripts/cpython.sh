#!/usr/bin/env bash
# Builds CPython 3.14 (GIL) and 3.14t (free-threaded) from Debian's source package and
# prints the two interpreter paths. Builds are cached: a machine that has them (same
# version, same flags) does not rebuild. Usage: scripts/cpython.sh [3.14|3.14t]...
#
# Where the source comes from: the orig tarball of Debian's `python3.14` source package,
# which is plain CPython source. It is taken from the package pool of the Debian archive
# that this machine's own apt sources name (so no host is written here) and checked
# against a pinned SHA-256. `apt-get source` is not used: sid's index runs ahead of its
# pool, so the newest version it names is often not served yet.
set -euo pipefail

VERSION=3.14.7
SHA256=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81
CACHE=${CTXLOCK_CPYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctxlock/cpython}
JOBS=${JOBS:-$(nproc)}
# Build packages beyond what a Rust/Python machine of this kind has; only the missing
# ones are installed (apt-get needs root, which CI and developers have here).
BUILD_DEPS=(build-essential pkg-config libssl-dev zlib1g-dev libffi-dev libsqlite3-dev
    libbz2-dev liblzma-dev libreadline-dev uuid-dev libncurses-dev libgdbm-dev
    libgdbm-compat-dev libzstd-dev xz-utils curl)

say() { echo "cpython.sh: $*" >&2; }

archive_uri() {
    # The first deb822 or one-line source whose URI ends in /debian (not -security).
    local uri
    uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | tr ' ' '\n' | grep -m1 -E '/debian/?$' || true)
    if [ -z "$uri" ]; then
        uri=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
            | awk '{print $2}' | grep -m1 -E '/debian/?$' || true)
    fi
    [ -n "$uri" ] || { say "no Debian archive in this machine's apt sources"; exit 1; }
    echo "${uri%/}"
}

ensure_deps() {
    local missing=()
    for p in "${BUILD_DEPS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing build packages: ${missing[*]}"
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    fi
}

fetch_source() {
    local tarball="$CACHE/src/python3.14_${VERSION}.orig.tar.xz"
    if [ ! -f "$tarball" ] || ! echo "$SHA256  $tarball" | sha256sum -c --quiet - 2>/dev/null; then
        mkdir -p "$CACHE/src"
        local url
        url="$(archive_uri)/pool/main/p/python3.14/python3.14_${VERSION}.orig.tar.xz"
        say "downloading $(basename "$tarball")"
        curl -fsSL --retry 3 -o "$tarball.part" "$url"
        echo "$SHA256  $tarball.part" | sha256sum -c --quiet - \
            || { say "checksum mismatch for $url"; rm -f "$tarball.part"; exit 1; }
        mv "$tarball.part" "$tarball"
    fi
    echo "$tarball"
}

build() { # $1 = 3.14 or 3.14t
    local flavour=$1 prefix="$CACHE/$VERSION${1#3.14}" exe flags=(--with-lto=no --without-ensurepip)
    exe="$prefix/bin/python$flavour"
    [ "$flavour" = 3.14t ] && flags+=(--disable-gil)
    if [ -x "$exe" ] && "$exe" -c 'import ssl, sqlite3, zlib, ctypes' 2>/dev/null; then
        echo "$exe"; return
    fi
    ensure_deps
    local tarball work
    tarball=$(fetch_source)
    work=$(mktemp -d)
    say "building CPython $VERSION ($flavour) into $prefix"
    tar -xJf "$tarball" -C "$work"
    (cd "$work"/Python-"$VERSION" \
        && ./configure --prefix="$prefix" "${flags[@]}" >"$work/configure.log" 2>&1 \
        && make -j"$JOBS" >"$work/make.log" 2>&1 \
        && rm -rf "$prefix" && make install >"$work/install.log" 2>&1) \
        || { say "build failed; logs in $work"; exit 1; }
    "$exe" -m ensurepip --upgrade >/dev/null 2>&1 || true
    rm -rf "$work"
    echo "$exe"
}

[ $# -gt 0 ] || set -- 3.14 3.14t
for f in "$@"; do
    case "$f" in
        3.14|3.14t) build "$f" ;;
        *) say "unknown flavour $f (3.14 or 3.14t)"; exit 2 ;;
    esac
done
