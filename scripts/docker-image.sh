#!/usr/bin/env bash
# Build the container image laneway:local from the release binary, with no
# image registry: no base image is pulled. The root filesystem is made here in
# a temporary directory (the binary, every library `ldd` lists and the dynamic
# loader, /etc/passwd and /etc/group with the non-root user laneway (uid and
# gid 10001), /tmp, /data) and handed to `docker import` with the image
# settings the top-level Dockerfile gives its image: ENTRYPOINT laneway, CMD
# `serve --data-dir /data --listen 0.0.0.0:9000 --admin-listen 0.0.0.0:9001`,
# EXPOSE 9000 9001, USER 10001:10001, VOLUME /data, NO_COLOR=1 (plain logs).
#
# The image has no shell and no curl. A health check runs the binary itself:
#   healthcheck: { test: ["CMD", "laneway", "admin", "tenant", "list"] }
# which calls the admin API on 127.0.0.1:9001 with $LANEWAY_ADMIN_TOKEN (set
# it in the container's environment; without it the probe fails).
# docker-compose.yml runs this image as store nodes and gateways of a
# cluster (LANEWAY_IMAGE=laneway:local docker-compose up --no-build).
#
# Idempotent: the image carries the sha256 of the binary and of this script as
# labels; when both match the existing image, nothing is rebuilt.
#
# Usage: scripts/docker-image.sh
# Environment:
#   LANEWAY_BIN            binary to package (default target/release/laneway;
#                          a relative path is taken from the repository root)
#   LANEWAY_IMAGE          image tag (default laneway:local)
#   LANEWAY_IMAGE_REBUILD  1: rebuild even when the labels match
set -euo pipefail

die() {
    printf 'docker-image.sh: %s\n' "$*" >&2
    exit 1
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script="$repo/scripts/docker-image.sh"
image=${LANEWAY_IMAGE:-laneway:local}
bin=${LANEWAY_BIN:-target/release/laneway}
[[ $bin == /* ]] || bin="$repo/$bin"
uid=10001
gid=10001

for tool in ldd sha256sum tar; do
    command -v "$tool" >/dev/null || die "$tool not found (needed to build the root filesystem)"
done
command -v docker >/dev/null ||
    die "docker not found: install Docker Engine (the image is built with 'docker import')"
if ! info_err=$(docker info 2>&1 >/dev/null); then
    die "no Docker engine answers ('docker info' failed): ${info_err##*$'\n'}"
fi
[[ -f $bin && -x $bin ]] ||
    die "no executable at $bin: build it with 'cargo build --release -p laneway-gateway' or set LANEWAY_BIN"

bin_sha=$(sha256sum "$bin" | cut -d' ' -f1)
recipe_sha=$(sha256sum "$script" | cut -d' ' -f1)

old_id=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [[ -n $old_id && ${LANEWAY_IMAGE_REBUILD:-0} != 1 ]]; then
    labels=$(docker image inspect "$image" --format \
        '{{index .Config.Labels "org.laneway.binary-sha256"}} {{index .Config.Labels "org.laneway.recipe-sha256"}}' \
        2>/dev/null || true)
    if [[ $labels == "$bin_sha $recipe_sha" ]]; then
        echo "docker-image.sh: $image is up to date (binary sha256 $bin_sha)"
        exit 0
    fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/laneway-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{usr/local/bin,etc,tmp,data,proc,sys,dev}

# The libraries the binary links, with their dependencies (ldd resolves the
# whole closure), each copied (symlinks followed) to the path ldd names, and
# the dynamic loader named by the ELF interpreter. linux-vdso has no file.
if ! ldd_out=$(ldd "$bin" 2>&1); then
    [[ $ldd_out == *"not a dynamic executable"* || $ldd_out == *"statically linked"* ]] ||
        die "ldd $bin failed: $ldd_out"
    ldd_out=""
fi
libs=()
while read -r line; do
    [[ -n $line ]] || continue
    [[ $line != *"not found"* ]] || die "ldd $bin: a library is missing: $line"
    case $line in
        *" => /"*) path=${line#*=> }; path=${path%% (*} ;;
        /*) path=${line%% (*} ;;
        *) continue ;; # linux-vdso.so.1, statically linked
    esac
    libs+=("$path")
done <<<"$ldd_out"
for lib in "${libs[@]}"; do
    [[ -f $lib ]] || die "ldd $bin names $lib, which is not a file"
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done
install -m 0755 "$bin" "$rootfs/usr/local/bin/laneway"

cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
laneway:x:$uid:$gid:laneway:/data:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
laneway:x:$gid:
EOF
# Name lookups (a cluster file naming other containers): glibc 2.34+ has the
# files and dns services built in, so no libnss_* is needed.
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
chmod 0644 "$rootfs"/etc/{passwd,group,nsswitch.conf}
chmod 1777 "$rootfs/tmp"
chmod 0750 "$rootfs/data"

# Everything belongs to root except /data, which belongs to laneway; whoever
# runs this script, the archive says so (a named volume copies /data's owner
# on first use).
tar -C "$rootfs" -cf "$work/rootfs.tar" --numeric-owner --owner=0 --group=0 --exclude=./data .
tar -C "$rootfs" -rf "$work/rootfs.tar" --numeric-owner --owner="$uid" --group="$gid" --no-recursion ./data

version=$("$bin" --version 2>/dev/null | awk '{print $NF}' || true)
docker import \
    --message "laneway ${version:-unknown} from $bin (scripts/docker-image.sh)" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'ENV NO_COLOR=1' \
    --change 'ENTRYPOINT ["/usr/local/bin/laneway"]' \
    --change 'CMD ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:9000", "--admin-listen", "0.0.0.0:9001"]' \
    --change 'EXPOSE 9000 9001' \
    --change "USER $uid:$gid" \
    --change 'VOLUME /data' \
    --change 'WORKDIR /data' \
    --change "LABEL org.laneway.binary-sha256=$bin_sha org.laneway.recipe-sha256=$recipe_sha org.opencontainers.image.version=${version:-unknown}" \
    "$work/rootfs.tar" "$image" >/dev/null

new_id=$(docker image inspect --format '{{.Id}}' "$image")
# The image this tag named before is now untagged; drop it unless a
# container still uses it.
if [[ -n $old_id && $old_id != "$new_id" ]]; then
    docker image rm "$old_id" >/dev/null 2>&1 || true
fi
size=$(docker image inspect --format '{{.Size}}' "$image")
echo "docker-image.sh: built $image ($new_id, $((size / 1024 / 1024)) MiB) from $bin (sha256 $bin_sha)"
