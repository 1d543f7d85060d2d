// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The XDP program zcnet attaches for an AF_XDP socket: a frame that arrives on queue Q goes to
// the socket at index Q of `xsks_map` (an XSKMAP), when one is there; every other frame goes on
// to the stack (XDP_PASS). It is libxdp's default program without its dispatcher.
//
// Built by build.sh in this directory (Debian's clang, target bpf); the object sits beside this
// file and the test `xdp_program_object_matches_its_source` rebuilds it and compares.
// No libbpf headers: the map is a legacy `maps` section definition and the helper is called by
// its number, so that the build needs only clang and linux/bpf.h (Debian's linux-libc-dev).

#include <linux/bpf.h>

#define SEC(name) __attribute__((section(name), used))

// The definition aya reads from the `maps` section (struct bpf_map_def of the old libbpf).
struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct bpf_map_def SEC("maps") xsks_map = {
	.type = BPF_MAP_TYPE_XSKMAP,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u32),
	.max_entries = 64,
};

// long bpf_redirect_map(struct bpf_map *map, u64 key, u64 flags): helper 51. The low bits of
// `flags` are the action when the key has no entry.
static long (*bpf_redirect_map)(void *map, __u64 key, __u64 flags) = (void *)BPF_FUNC_redirect_map;

SEC("xdp")
int zcnet_xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char _license[] SEC("license") = "Dual MIT/GPL";
