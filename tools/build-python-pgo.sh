#!/usr/bin/env bash
# CPython 3.12 built the way production Pythons are built (profile-guided and link-time
# optimization, as in the python:3.12-slim image our Dockerfile starts from, and in
# Debian's and Ubuntu's packages), installed under DEST. pyenv builds without them, and
# Loam's transitions run 1.16-1.26x slower there: docs/decisions/0057 has the figures. The
# benchmarks report which build they ran on; `make venv-pgo` puts the project on this one.
#
#   tools/build-python-pgo.sh DEST        (~15 minutes on 2 cores)
#
# The source is the upstream tarball as Ubuntu's archive carries it (an apt registry,
# reachable where python.org is not), checked against its published SHA-256.
set -euo pipefail
DEST=${1:?usage: tools/build-python-pgo.sh DEST}
VERSION=3.12.3
URL=http://archive.ubuntu.com/ubuntu/pool/main/p/python3.12/python3.12_${VERSION}.orig.tar.xz
SHA256=56bfef1fdfc1221ce6720e43a661e3eb41785dd914ce99698d8c7896af4bdaa1
# The profile run: a short list of CPython's own test modules, as the python:3.12 image's
# build uses (without test_threading: its recursion test runs for many minutes profiled).
PROFILE_TESTS="test_array test_base64 test_binascii test_binop test_bytes test_c_locale_coercion
test_class test_cmath test_codecs test_compile test_complex test_csv test_decimal test_dict
test_float test_fstring test_hashlib test_io test_iter test_json test_long test_math
test_memoryview test_pickle test_re test_set test_slice test_struct test_time
test_traceback test_unicode"

missing=()
for pkg in build-essential libssl-dev zlib1g-dev libffi-dev libsqlite3-dev libbz2-dev liblzma-dev \
    libreadline-dev uuid-dev libncurses-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq && apt-get install -y -qq "${missing[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsSL "$URL" -o "$work/src.tar.xz"
echo "$SHA256  $work/src.tar.xz" | sha256sum -c --quiet
tar -xf "$work/src.tar.xz" -C "$work"
cd "$work/Python-$VERSION"
echo "building CPython $VERSION with PGO and LTO into $DEST (logs: $work, kept on failure)"
trap '' EXIT  # keep the logs if a step fails
./configure --prefix="$DEST" --enable-optimizations --with-lto --enable-loadable-sqlite-extensions \
  >"$work/configure.log" 2>&1
make -j"$(nproc)" PROFILE_TASK="-m test --pgo $(echo $PROFILE_TESTS)" >"$work/make.log" 2>&1
make install >"$work/install.log" 2>&1
rm -rf "$work"
"$DEST/bin/python3.12" -c 'import sysconfig; assert "--enable-optimizations" in sysconfig.get_config_var("CONFIG_ARGS")'
echo "CPython $VERSION (PGO, LTO): $DEST/bin/python3.12"
