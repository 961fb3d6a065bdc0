/*
 * The crc32c stage (include/rgaps/plugin.h, "stage"): catches data corrupted
 * between two hosts. On the sending host it computes the CRC-32C
 * (Castagnoli) of every chunk before the chunk is sent and puts it in the
 * record's stage tag (4 bytes, little-endian); on the receiving host it
 * computes it again over the chunk as it landed in the ring and refuses the
 * message when they differ, so that a corrupted message is dropped and
 * reported to subscribers as a gap instead of delivered.
 *
 * The CRC uses the SSE4.2 instruction where the CPU has it, else a table
 * (slice by 8). Both read host memory only: the sender's chunk is in the host
 * pool or in its staging slot, the receiver's in the ring.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rgaps/plugin.h"

#define POLY 0x82f63b78u /* CRC-32C, reflected */

static uint32_t table[8][256];
static bool have_sse42;

__attribute__((constructor)) static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
		table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_table(uint32_t crc, const uint8_t *p, uint64_t n)
{
	while (n && ((uintptr_t)p & 7)) {
		crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
		n--;
	}
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		w ^= crc;
		crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
		      table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
		      table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t *p,
							    uint64_t n)
{
	uint64_t c = crc;

	while (n && ((uintptr_t)p & 7)) {
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
		n--;
	}
	while (n >= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c = __builtin_ia32_crc32di(c, w);
		p += 8;
		n -= 8;
	}
	while (n--)
		c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
	return (uint32_t)c;
}
#endif

/* CRC-32C of n bytes (crc32c("123456789") = 0xe3069283). */
static uint32_t crc32c(const uint8_t *p, uint64_t n)
{
#if defined(__x86_64__)
	if (have_sse42)
		return ~crc_sse42(~0u, p, n);
#endif
	return ~crc_table(~0u, p, n);
}

static int st_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	*ctx_p = NULL;
	if (env && env->log)
		env->log(2, "crc32c: %s", have_sse42 ? "SSE4.2 instruction" : "table (no SSE4.2)");
	return 0;
}

static int st_describe(void *ctx, struct rgaps_stage_desc *d)
{
	*d = (struct rgaps_stage_desc){
		.points = RGAPS_STAGE_BEFORE_SEND | RGAPS_STAGE_AFTER_LANDING,
		.tag_len = 4,
	};
	return 0;
}

static int st_process(void *ctx, struct rgaps_stage_work *w)
{
	uint32_t crc, want;

	if (w->mem_kind != RGAPS_MEM_HOST) {
		snprintf(w->why, w->whylen, "crc32c reads host memory only");
		return RGAPS_STAGE_FAIL;
	}
	crc = crc32c(w->data, w->len);
	if (w->point == RGAPS_STAGE_BEFORE_SEND) {
		for (int i = 0; i < 4; i++)
			w->tag[i] = (uint8_t)(crc >> (8 * i));
		return RGAPS_STAGE_CONTINUE;
	}
	want = (uint32_t)w->tag[0] | (uint32_t)w->tag[1] << 8 | (uint32_t)w->tag[2] << 16 |
	       (uint32_t)w->tag[3] << 24;
	if (crc == want)
		return RGAPS_STAGE_CONTINUE;
	snprintf(w->why, w->whylen,
		 "crc32c mismatch in bytes %llu..%llu of message %llu: 0x%08x, the sender's 0x%08x",
		 (unsigned long long)w->chunk_off, (unsigned long long)(w->chunk_off + w->len - 1),
		 (unsigned long long)w->msg_seq, crc, want);
	return RGAPS_STAGE_FAIL;
}

static const struct rgaps_stage_ops crc32c_ops = {
	.init = st_init,
	.describe = st_describe,
	.process = st_process,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_STAGE,
	.ops_size = sizeof(struct rgaps_stage_ops),
	.name = "crc32c",
	.description = "CRC-32C of every chunk, checked on the receiving host",
	.ops = &crc32c_ops,
};
