#!/bin/sh
# Rebuilds xdp_redirect.o from xdp_redirect.c: Debian's clang, target bpf, no debug info (so the
# object holds no path of this machine and is the same wherever it is built with this clang).
# usage: build.sh [OUT]   (default: xdp_redirect.o beside this script)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/xdp_redirect.o}
cd "$here"
# linux/types.h includes asm/types.h, which Debian keeps under the host's multiarch directory.
multiarch=$(clang -print-multiarch)
clang -O2 -target bpf -I"/usr/include/$multiarch" -c xdp_redirect.c -o "$out"
