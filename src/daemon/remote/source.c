/*
 * Sources: a topic's messages from one origin host as this host receives
 * them (struct rt_source in internal.h). A source outlives its rings: when a
 * ring goes (a flap, a relay that failed, a tree that changed), the next one
 * goes on where it stopped, whichever peer sends it, and its messages land on
 * the same landing stream, so that a subscriber sees one stream per origin
 * and every loss once. Sources are kept by name: the topic itself may be
 * removed while no ring lands (topic_idle_s) and made again later.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

struct rt_source *rt_source_of(struct rgapsd_remote *rt, const char *topic, const char *origin,
			       bool create)
{
	struct rt_source *src;

	SLIST_FOREACH(src, &rt->sources, link)
		if (strcmp(src->topic, topic) == 0 && strcmp(src->origin, origin) == 0)
			return src;
	if (!create)
		return NULL;
	src = calloc(1, sizeof(*src));
	if (!src)
		return NULL;
	src->rt = rt;
	snprintf(src->topic, sizeof(src->topic), "%s", topic);
	snprintf(src->origin, sizeof(src->origin), "%s", origin);
	SLIST_INIT(&src->outs);
	rt_window_init(&src->window, rt);
	SLIST_INSERT_HEAD(&rt->sources, src, link);
	return src;
}

int rt_source_open(struct rt_source *src, struct rgapsd_topic *t)
{
	int e;

	rgaps_require(!src->t || src->t == t);
	src->t = t;
	if (src->pub.open)
		return 0;
	e = rt_local_pub_open(t, &src->pub);
	if (e)
		rgaps_warn("topic '%s': no landing stream for messages from %s: %s", src->topic,
			   src->origin, strerror(-e));
	return e;
}

void rt_source_check(struct rt_source *src)
{
	if (!src->t || src->in)
		return;
	/* Between two rings the stream stays for the subscribers, so that they see one. */
	if (src->pub.open && !src->t->local_subs)
		rt_local_pub_close(&src->pub);
	if (!src->pub.open && SLIST_EMPTY(&src->outs)) {
		src->t = NULL;
		rt_window_free(&src->window); /* nobody to send it again to any more */
	}
}

bool rt_sources_hold(const struct rgapsd_remote *rt, const struct rgapsd_topic *t)
{
	const struct rt_source *src;

	SLIST_FOREACH(src, &rt->sources, link)
		if (src->t == t)
			return true;
	return false;
}

void rt_sources_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_source *src;

	SLIST_FOREACH(src, &rt->sources, link) {
		if (src->t != t)
			continue;
		rgaps_require(!src->in && SLIST_EMPTY(&src->outs));
		rt_local_pub_close(&src->pub);
		rt_window_free(&src->window);
		src->t = NULL;
	}
}

void rt_sources_free(struct rgapsd_remote *rt)
{
	struct rt_source *src;

	while ((src = SLIST_FIRST(&rt->sources))) {
		SLIST_REMOVE_HEAD(&rt->sources, link);
		rt_local_pub_close(&src->pub);
		/* The keeper is stopped and its completions ran; no ring sends from it. */
		rgaps_require(rt_window_idle(&src->window));
		rt_window_free(&src->window);
		free(src);
	}
}
