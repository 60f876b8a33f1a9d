#!/usr/bin/env bash
# Refreshes the vendored kernel uapi and libbpf headers that the BPF programs build
# against, so that the committed objects do not depend on the headers of whoever builds
# them. Copies the closure of what bpf/lib includes from the Debian packages
# linux-libc-dev and libbpf-dev (amd64; BPF is little-endian like the hosts we target).
set -euo pipefail
cd "$(dirname "$0")"
src=/usr/include
arch=/usr/include/x86_64-linux-gnu
files=(
  asm-generic/bitsperlong.h asm-generic/int-ll64.h asm-generic/posix_types.h asm-generic/types.h
  bpf/bpf_endian.h bpf/bpf_helper_defs.h bpf/bpf_helpers.h
  linux/bpf.h linux/bpf_common.h linux/byteorder/little_endian.h linux/const.h linux/icmpv6.h
  linux/if_ether.h linux/in.h linux/in6.h linux/ip.h linux/ipv6.h linux/libc-compat.h
  linux/pkt_cls.h linux/pkt_sched.h linux/posix_types.h linux/socket.h linux/stddef.h
  linux/swab.h linux/tcp.h linux/types.h linux/udp.h
)
for f in "${files[@]}"; do mkdir -p "$(dirname "$f")"; cp "$src/$f" "$f"; done
for f in asm/bitsperlong.h asm/byteorder.h asm/posix_types.h asm/posix_types_64.h asm/swab.h asm/types.h; do
  mkdir -p asm; cp "$arch/$f" "$f"
done
