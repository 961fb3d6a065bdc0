/*
 * The remote path's view of the local topic: the forwarder's subscriber slot
 * (every message published on this host, taken to be sent to peers) and the
 * landing publisher of each in ring (messages from peers, published here).
 * This is the only file of src/daemon/remote/ that calls the topic API of
 * src/common/topic.h, so a change of that API is made here alone.
 */
#include <errno.h>
#include <unistd.h>

#include "internal.h"

int rt_local_sub_open(struct rgapsd_topic *t, struct rt_local_sub *s)
{
	int r = rgaps_topic_sub_open(&t->t, 0, getpid(), &s->slot);

	s->t = t;
	s->open = r == 0;
	return r;
}

int rt_local_sub_take(struct rt_local_sub *s, int timeout_ms, struct rt_local_msg *m_p)
{
	struct rgaps_topic_msg msg;
	int r = rgaps_topic_take(&s->t->t, s->slot, timeout_ms, 0, NULL, NULL, &msg);

	if (r)
		return r;
	*m_p = (struct rt_local_msg){
		.seq = msg.seq,
		.size = msg.size,
		.ts_ns = msg.ts_ns,
		.data = s->t->t.pool + msg.off,
		.remote_origin = (msg.flags & RGAPS_ENTRY_REMOTE) != 0,
		.token = msg.token,
	};
	return 0;
}

void rt_local_sub_release(struct rt_local_sub *s, const struct rt_local_msg *m)
{
	if (s->open)
		rgaps_topic_release(&s->t->t, s->slot, m->token);
}

void rt_local_sub_close(struct rt_local_sub *s)
{
	if (s->open)
		rgaps_topic_sub_close(&s->t->t, s->slot);
	s->open = false;
}

int rt_local_pub_open(struct rgapsd_topic *t, struct rt_local_pub *p)
{
	int r = rgaps_topic_pub_open(&t->t, 0, getpid(), &p->slot);

	p->t = t;
	p->open = r == 0;
	return r;
}

int rt_local_pub_loan(struct rt_local_pub *p, uint64_t size, uint32_t *token_p, uint8_t **dst_p)
{
	uint64_t off;
	uint32_t tok;
	int r = rgaps_topic_loan(&p->t->t, p->slot, size, 0, NULL, NULL, &tok, &off);

	if (r)
		return r;
	*token_p = tok;
	*dst_p = p->t->t.pool + off;
	return 0;
}

int rt_local_pub_commit(struct rt_local_pub *p, uint32_t token, uint64_t size, uint64_t ts_ns,
			uint32_t gap)
{
	return rgaps_topic_commit_remote(&p->t->t, p->slot, token, size, ts_ns, gap, NULL);
}

void rt_local_pub_cancel(struct rt_local_pub *p, uint32_t token)
{
	rgaps_topic_cancel(&p->t->t, p->slot, token);
}

void rt_local_pub_close(struct rt_local_pub *p)
{
	if (p->open)
		rgaps_topic_pub_close(&p->t->t, p->slot);
	p->open = false;
}

uint8_t *rt_local_pool(const struct rgapsd_topic *t)
{
	return t->t.pool;
}
