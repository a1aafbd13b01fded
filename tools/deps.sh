# tools/deps.sh: sourced by tools/up and tests/run. ensure_deps installs the
# Debian packages quorum needs to build, test and benchmark, and only those
# that are missing (one apt-get update, one install).
QUORUM_DEBS="gcc meson ninja-build pkg-config libuv1-dev libnghttp2-dev protobuf-c-compiler \
libprotobuf-c-dev liblmdb-dev libcriterion-dev etcd-server etcd-client python3 python3-etcd3 \
python3-grpcio python3-protobuf nghttp2-client clang lmdb-utils liburcu-dev libjemalloc-dev \
libssl-dev openssl libcrypt-dev libjansson-dev libhttp-parser-dev curl \
python3-prometheus-client prometheus python3-yaml libyaml-dev chromium chromium-driver python3-selenium \
dnsmasq-base nftables iproute2 util-linux \
zookeeper python3-kazoo libzookeeper-mt-dev"

ensure_deps() {
    local missing=()
    for p in $QUORUM_DEBS; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >/dev/null
}

# build_dir DIR [meson options...]: configure once, then build.
build_dir() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >/dev/null
    fi
    ninja -C "$dir" >/dev/null
}
