/*
 * Relay topologies as pure functions (topology.h): the order of a topic's
 * hosts, the parent of each in the tree a mode lays over that order, and the
 * model "auto" chooses with. The same inputs give the same tree on every host.
 */
#include "topology.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/util.h"

/*
 * What a hop costs besides its bytes (a turn of the loop, a TCP round, a
 * header), as the bytes a link moves meanwhile: about 50 us at 10 Gbit/s. It
 * only tells apart modes whose byte counts are close: a few small messages go
 * the way with the fewest hops.
 */
#define RT_HOP_COST_BYTES (64.0 * 1024)

int rt_relay_mode_parse(const char *s, struct rt_relay_mode *m_p)
{
	enum rgaps_relay kind;
	uint32_t fanout;

	if (rgaps__relay_parse(s, &kind, &fanout) || kind == RGAPS_RELAY_AUTO)
		return -EINVAL;
	m_p->kind = kind;
	m_p->fanout = fanout;
	return 0;
}

const char *rt_relay_mode_name(const struct rt_relay_mode *m, char *buf, size_t len)
{
	switch (m->kind) {
	case RGAPS_RELAY_STAR:
		snprintf(buf, len, "star");
		break;
	case RGAPS_RELAY_CHAIN:
		snprintf(buf, len, "chain");
		break;
	case RGAPS_RELAY_TREE:
		snprintf(buf, len, "tree:%u", m->fanout);
		break;
	case RGAPS_RELAY_AUTO:
		snprintf(buf, len, "auto");
		break;
	}
	return buf;
}

bool rt_relay_mode_equal(const struct rt_relay_mode *a, const struct rt_relay_mode *b)
{
	return a->kind == b->kind && (a->kind != RGAPS_RELAY_TREE || a->fanout == b->fanout);
}

static int host_cmp(const void *pa, const void *pb)
{
	const struct rt_tree_host *a = pa, *b = pb;

	if (a->joined != b->joined)
		return a->joined < b->joined ? -1 : 1;
	return strcmp(a->name, b->name);
}

void rt_tree_sort(struct rt_tree_host *hosts, uint32_t n)
{
	if (n > 1)
		qsort(hosts, n, sizeof(*hosts), host_cmp);
}

/* The parent of index i (>= 1) in the layout, whether it is up or not. */
static uint32_t layout_parent(const struct rt_relay_mode *m, uint32_t i)
{
	switch (m->kind) {
	case RGAPS_RELAY_CHAIN:
		return i - 1;
	case RGAPS_RELAY_TREE:
		return (i - 1) / m->fanout;
	case RGAPS_RELAY_STAR:
	case RGAPS_RELAY_AUTO:
		break;
	}
	return 0;
}

uint32_t rt_tree_parent(const struct rt_relay_mode *m, const bool *live, uint32_t n, uint32_t i)
{
	uint32_t a;

	if (i == 0 || i > n)
		return RT_TREE_NONE;
	/* Each step goes to a lower index: at most i steps. */
	for (a = layout_parent(m, i); a > 0 && !live[a]; a = layout_parent(m, a))
		;
	return live[a] ? a : RT_TREE_NONE;
}

uint32_t rt_tree_depth(const struct rt_relay_mode *m, uint32_t i)
{
	uint32_t d = 0;

	for (; i > 0; i = layout_parent(m, i))
		d++;
	return d;
}

double rt_relay_predict(const struct rt_relay_mode *m, uint32_t n, uint64_t size, uint64_t chunk)
{
	double msg = (double)RGAPS_MAX(size, 1), c = (double)RGAPS_MIN(RGAPS_MAX(chunk, 1), size);
	double copies, depth;

	if (n == 0)
		return 0;
	switch (m->kind) {
	case RGAPS_RELAY_CHAIN:
		copies = 1;
		break;
	case RGAPS_RELAY_TREE:
		copies = RGAPS_MIN(m->fanout, n);
		break;
	case RGAPS_RELAY_STAR:
	case RGAPS_RELAY_AUTO:
	default:
		copies = n;
		break;
	}
	/* The last host of the order is the deepest. */
	depth = rt_tree_depth(m, n);
	return (copies * (msg + (depth - 1) * c) + depth * RT_HOP_COST_BYTES) / msg;
}

void rt_relay_auto(uint32_t n, uint64_t size, uint64_t chunk, struct rt_relay_mode *m_p, char *why,
		   size_t whylen)
{
	static const struct rt_relay_mode candidates[] = {
		{ RGAPS_RELAY_STAR, 0 }, { RGAPS_RELAY_TREE, 8 }, { RGAPS_RELAY_TREE, 4 },
		{ RGAPS_RELAY_TREE, 3 }, { RGAPS_RELAY_TREE, 2 }, { RGAPS_RELAY_CHAIN, 1 },
	};
	double t[RGAPS_ARRAY_SIZE(candidates)];
	char name[RT_RELAY_NAME_MAX], csz[32], msz[32], others[256] = "";
	size_t best = 0, off = 0;

	/* In order of depth: a later one must be faster to win, not as fast. */
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(candidates); i++) {
		t[i] = rt_relay_predict(&candidates[i], n, size, chunk);
		if (t[i] < t[best] * (1 - 1e-9))
			best = i;
	}
	*m_p = candidates[best];
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(candidates) && off < sizeof(others); i++) {
		if (i == best)
			continue;
		off += (size_t)snprintf(
			others + off, sizeof(others) - off, "%s%s %.2f", off ? ", " : "",
			rt_relay_mode_name(&candidates[i], name, sizeof(name)), t[i]);
	}
	rgaps__format_size(size, msz, sizeof(msz));
	rgaps__format_size(chunk, csz, sizeof(csz));
	snprintf(why, whylen,
		 "%s for %u host%s and %s messages in %s chunks: predicted %.2f message times on "
		 "one link (%s)",
		 rt_relay_mode_name(m_p, name, sizeof(name)), n, n == 1 ? "" : "s", msz, csz,
		 t[best], others);
}
