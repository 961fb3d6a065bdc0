/*
 * The gpusum stage (include/rgaps/plugin.h, "stage"; docs/GPU.md, "The gpusum
 * stage"): an end-to-end check of every message, done on the receiving host's
 * GPU once the message is whole in its pool. It catches what corrupts or
 * misplaces bytes anywhere between the sender's pool and the receiver's:
 * the staging copy, the wire, the ring, the host-to-device copy.
 *
 *  - before send (sender): the chunk's part of the message's checksum
 *    (gpusum.h: a sum of 32-bit words weighted by their index in the message,
 *    so parts add up), into the chunk's 8-byte tag;
 *  - after landing (receiver): the tag added to the message's state, with the
 *    bytes it covers (the chunks of a message come one at a time);
 *  - before publish (receiver): the checksum of the whole message computed
 *    where it lies: by a CUDA kernel on the pool's GPU for device memory
 *    (gpusum_cuda.cu), on the CPU for host memory; a difference refuses the
 *    message (a counted gap), with both values in the reason.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rgaps/plugin.h"
#include "gpusum.h"

struct msg_state {
	uint64_t sum;	/* of the tags of the chunks landed so far */
	uint64_t bytes; /* that those chunks hold */
};

static void put64(uint8_t *t, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		t[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *t)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)t[i] << (8 * i);
	return v;
}

static int st_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	*ctx_p = NULL; /* no CUDA here: a host without a GPU loads it and checks host topics */
	return 0;
}

static void st_fini(void *ctx)
{
	gpusum_device_fini();
}

static int st_describe(void *ctx, struct rgaps_stage_desc *d)
{
	*d = (struct rgaps_stage_desc){
		.points = RGAPS_STAGE_BEFORE_SEND | RGAPS_STAGE_AFTER_LANDING |
			  RGAPS_STAGE_BEFORE_PUBLISH,
		.msg_state_size = sizeof(struct msg_state),
		.tag_len = 8,
	};
	return 0;
}

/* The checksum part of w's bytes, where they are; false with w->why on a CUDA error. */
static bool sum_of(struct rgaps_stage_work *w, uint64_t *sum_p, int *device_p)
{
	*device_p = -1;
	if (w->mem_kind == RGAPS_MEM_HOST) {
		*sum_p = gpusum_cpu(w->data, w->len, w->chunk_off);
		return true;
	}
	if (w->mem_kind == RGAPS_MEM_CUDA)
		return gpusum_device(w->data, w->len, w->chunk_off, sum_p, device_p, w->why,
				     w->whylen) == 0;
	snprintf(w->why, w->whylen, "gpusum: unknown memory kind %u", w->mem_kind);
	return false;
}

static int st_process(void *ctx, struct rgaps_stage_work *w)
{
	struct msg_state *ms = w->msg_state;
	char where[24] = "on the CPU";
	uint64_t sum;
	int dev;

	switch (w->point) {
	case RGAPS_STAGE_BEFORE_SEND:
		if (!sum_of(w, &sum, &dev))
			return RGAPS_STAGE_FAIL;
		put64(w->tag, sum);
		return RGAPS_STAGE_CONTINUE;
	case RGAPS_STAGE_AFTER_LANDING:
		ms->sum += get64(w->tag);
		ms->bytes += w->len;
		return RGAPS_STAGE_CONTINUE;
	case RGAPS_STAGE_BEFORE_PUBLISH:
		if (ms->bytes != w->len) {
			snprintf(w->why, w->whylen,
				 "gpusum: message %llu has %llu bytes, its chunks' sums cover %llu",
				 (unsigned long long)w->msg_seq, (unsigned long long)w->len,
				 (unsigned long long)ms->bytes);
			return RGAPS_STAGE_FAIL;
		}
		if (!sum_of(w, &sum, &dev))
			return RGAPS_STAGE_FAIL;
		if (sum == ms->sum)
			return RGAPS_STAGE_CONTINUE;
		if (dev >= 0)
			snprintf(where, sizeof(where), "on GPU %d", dev);
		snprintf(w->why, w->whylen,
			 "gpusum mismatch in message %llu (%llu bytes, summed %s): 0x%016llx, the "
			 "sender's 0x%016llx",
			 (unsigned long long)w->msg_seq, (unsigned long long)w->len, where,
			 (unsigned long long)sum, (unsigned long long)ms->sum);
		return RGAPS_STAGE_FAIL;
	default:
		snprintf(w->why, w->whylen, "gpusum: unknown stage point 0x%x", w->point);
		return RGAPS_STAGE_FAIL;
	}
}

static const struct rgaps_stage_ops gpusum_ops = {
	.init = st_init,
	.fini = st_fini,
	.describe = st_describe,
	.process = st_process,
};

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = RGAPS_PLUGIN_ABI_VERSION,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = RGAPS_PLUGIN_STAGE,
	.ops_size = sizeof(struct rgaps_stage_ops),
	.name = "gpusum",
	.description = "positional checksum of every message, checked on the receiving host's "
		       "GPU (host memory: on its CPU)",
	.ops = &gpusum_ops,
};
