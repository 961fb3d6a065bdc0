/*
 * Pluggable stages (include/rgaps/plugin.h, "stage"): the steps a topic's
 * "stages" key inserts into the remote path, run at three points of its two
 * state machines: before a chunk is sent (sender.c, CHUNK_PROCESSING), after
 * a record landed (receiver.c, IN_CHECKING) and before a whole message is
 * published here (receiver.c, IN_FINISHING).
 *
 * Each topic's stages run in their configured order on a pool of stage
 * worker threads, never on the loop: a unit of work (struct rt_swork) goes
 * through every stage of the topic that declared its point, each either
 * finishing at once (CONTINUE), later from any thread (ASYNC: then the next
 * stage is queued from there) or refusing (FAIL); the outcome comes back to
 * the loop through the mailbox. A stage plugin is loaded once per daemon;
 * each topic that names it gets its own topic state and its own slice of the
 * 8 tag bytes a tagged record carries behind its chunk (RGAPS_RECORD_TAG).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/log.h"
#include "internal.h"

#define STATE_MAX (1u << 20) /* a stage's state, per topic or per message */

const char *const rt_stage_point_names[RT_POINTS] = { "before_send", "after_landing",
						      "before_publish" };

static struct rt_stage_plugin *plugin_get(struct rgapsd_remote *rt, const char *name, char *err,
					  size_t errlen)
{
	struct rgaps_plugin_env env;
	struct rt_stage_plugin *sp;
	int e;

	SLIST_FOREACH(sp, &rt->stage_plugins, link)
		if (strcmp(sp->lp->name, name) == 0)
			return sp;
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e = rgaps__plugin_load(rt->d->plugin_dir, RGAPS_PLUGIN_STAGE, name, &sp->lp, err, errlen);
	if (e) {
		free(sp);
		return NULL;
	}
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, rt->d->loop);
	e = sp->lp->ops.stage.init(&env, &sp->ctx);
	if (!e)
		e = sp->lp->ops.stage.describe(sp->ctx, &sp->desc);
	if (e) {
		snprintf(err, errlen, "stage '%s': %s failed: %s", name,
			 sp->ctx ? "describe" : "init", strerror(-e));
		goto err;
	}
	if (!sp->desc.points ||
	    (sp->desc.points & ~(uint32_t)(RGAPS_STAGE_BEFORE_SEND | RGAPS_STAGE_AFTER_LANDING |
					   RGAPS_STAGE_BEFORE_PUBLISH)) ||
	    sp->desc.tag_len > RGAPS_STAGE_TAG_MAX || sp->desc.topic_state_size > STATE_MAX ||
	    sp->desc.msg_state_size > STATE_MAX) {
		snprintf(err, errlen,
			 "stage '%s' describes itself out of bounds (points 0x%x, tag %u bytes, "
			 "states %u and %u bytes)",
			 name, sp->desc.points, sp->desc.tag_len, sp->desc.topic_state_size,
			 sp->desc.msg_state_size);
		goto err;
	}
	rgaps_info("loaded stage plugin '%s' from %s (points 0x%x, tag %u bytes)", name,
		   sp->lp->path, sp->desc.points, sp->desc.tag_len);
	SLIST_INSERT_HEAD(&rt->stage_plugins, sp, link);
	return sp;
err:
	sp->lp->ops.stage.fini(sp->ctx);
	rgaps__plugin_unload(sp->lp);
	free(sp);
	return NULL;
}

struct rt_stages *rt_stages_of(struct rgapsd_remote *rt, struct rgapsd_topic *t, char *err,
			       size_t errlen)
{
	static struct rt_stages none; /* topics without stages share this empty set */
	struct rt_stages *st;
	uint32_t tag = 0, state = 0;

	if (!t->cfg.nstages)
		return &none;
	SLIST_FOREACH(st, &rt->stages, link)
		if (st->t == t)
			return st;
	st = calloc(1, sizeof(*st));
	if (!st) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	st->t = t;
	for (uint32_t i = 0; i < t->cfg.nstages; i++) {
		struct rt_stage_plugin *sp = plugin_get(rt, t->cfg.stages[i], err, errlen);
		int e;

		if (!sp)
			goto err;
		st->s[i].sp = sp;
		st->s[i].tag_off = tag;
		st->s[i].state_off = state;
		tag += sp->desc.tag_len;
		state += sp->desc.msg_state_size;
		st->points |= sp->desc.points;
		if (tag > RGAPS_STAGE_TAG_MAX) {
			snprintf(err, errlen,
				 "the stages of topic '%s' need %u tag bytes, at most %d",
				 t->cfg.name, tag, RGAPS_STAGE_TAG_MAX);
			goto err;
		}
		st->tag_len = tag;
		st->s[i].topic_state = calloc(1, sp->desc.topic_state_size + 1);
		if (!st->s[i].topic_state) {
			snprintf(err, errlen, "out of memory");
			goto err;
		}
		st->n = i + 1;
		e = sp->lp->ops.stage.topic_open(sp->ctx, t->cfg.name, st->s[i].topic_state);
		if (e) {
			snprintf(err, errlen, "stage '%s' refused topic '%s': %s", sp->lp->name,
				 t->cfg.name, strerror(-e));
			st->s[i].sp = NULL; /* not opened: not closed */
			goto err;
		}
	}
	st->msg_state_size = state;
	SLIST_INSERT_HEAD(&rt->stages, st, link);
	return st;
err:
	rt_stages_free(st);
	return NULL;
}

void rt_stages_free(struct rt_stages *st)
{
	for (uint32_t i = 0; i < st->n; i++) {
		if (st->s[i].sp)
			st->s[i].sp->lp->ops.stage.topic_close(st->s[i].sp->ctx,
							       st->s[i].topic_state);
		free(st->s[i].topic_state);
	}
	free(st);
}

void rt_stages_topic_gone(struct rgapsd_remote *rt, struct rgapsd_topic *t)
{
	struct rt_stages *st;

	SLIST_FOREACH(st, &rt->stages, link) {
		if (st->t == t) {
			SLIST_REMOVE(&rt->stages, st, rt_stages, link);
			rt_stages_free(st);
			return;
		}
	}
}

void rt_stages_stop(struct rgapsd_remote *rt)
{
	struct rt_stage_plugin *sp;

	while (!SLIST_EMPTY(&rt->stages))
		rt_stages_topic_gone(rt, SLIST_FIRST(&rt->stages)->t);
	while ((sp = SLIST_FIRST(&rt->stage_plugins))) {
		SLIST_REMOVE_HEAD(&rt->stage_plugins, link);
		sp->lp->ops.stage.fini(sp->ctx);
		rgaps__plugin_unload(sp->lp);
		free(sp);
	}
}

/* ---------------------------------------------------------------- running */

static int point_index(uint32_t point)
{
	return point == RGAPS_STAGE_BEFORE_SEND	    ? RT_POINT_SEND
	       : point == RGAPS_STAGE_AFTER_LANDING ? RT_POINT_LANDING
						    : RT_POINT_PUBLISH;
}

static void swork_run(struct rgapsd_job *job);

/* A stage that said ASYNC is done (any thread): go on with the next stage, or report. */
static void swork_async_done(struct rgaps_stage_work *work, int result)
{
	struct rt_swork *sw = RGAPS_CONTAINER_OF(work, struct rt_swork, w);

	if (result != RGAPS_STAGE_CONTINUE) {
		sw->result = RGAPS_STAGE_FAIL;
		if (!sw->why[0])
			snprintf(sw->why, sizeof(sw->why), "stage '%s' failed",
				 sw->st->s[sw->next - 1].sp->lp->name);
		sw->t_end = rgaps_now_ns(CLOCK_MONOTONIC);
		rgapsd_mailbox_post(&sw->rt->mb, &sw->job.done);
		return;
	}
	rgapsd_worker_submit(&sw->rt->stage_pool, &sw->job); /* the next stage, if any */
}

/* On a stage worker: run the topic's stages at this point from sw->next on. */
static void swork_run(struct rgapsd_job *job)
{
	struct rt_swork *sw = RGAPS_CONTAINER_OF(job, struct rt_swork, job);
	struct rt_stages *st = sw->st;

	if (!sw->t_run)
		sw->t_run = rgaps_now_ns(CLOCK_MONOTONIC);
	while (sw->next < st->n) {
		uint32_t i = sw->next++;
		struct rt_stage_plugin *sp = st->s[i].sp;
		int r;

		if (!(sp->desc.points & sw->w.point))
			continue;
		sw->w.tag = sw->tag + st->s[i].tag_off;
		sw->w.topic_state = st->s[i].topic_state;
		sw->w.msg_state =
			sw->msg_state ? (uint8_t *)sw->msg_state + st->s[i].state_off : NULL;
		r = sp->lp->ops.stage.process(sp->ctx, &sw->w);
		if (r == RGAPS_STAGE_ASYNC)
			return; /* swork_async_done goes on, from wherever the stage calls it */
		if (r != RGAPS_STAGE_CONTINUE) {
			sw->result = RGAPS_STAGE_FAIL;
			if (!sw->why[0])
				snprintf(sw->why, sizeof(sw->why), "stage '%s' failed",
					 sp->lp->name);
			break;
		}
	}
	sw->t_end = rgaps_now_ns(CLOCK_MONOTONIC);
	rgapsd_mailbox_post(&sw->rt->mb, &job->done); /* job->manual: we report */
}

static void swork_done(struct rgapsd_msg *m)
{
	struct rt_swork *sw = RGAPS_CONTAINER_OF(m, struct rt_swork, job.done);
	int p = point_index(sw->w.point);

	sw->st->runs[p]++;
	sw->st->ns[p] += sw->t_end - sw->t_run;
	if (sw->result != RGAPS_STAGE_CONTINUE)
		sw->st->fails[p]++;
	sw->phase = SWORK_DONE;
	sw->done(sw);
}

bool rt_stages_at(const struct rt_stages *st, uint32_t point)
{
	return (st->points & point) != 0;
}

void rt_swork_start(struct rgapsd_remote *rt, struct rt_swork *sw)
{
	sw->rt = rt;
	sw->phase = SWORK_RUNNING;
	sw->next = 0;
	sw->t_run = 0;
	sw->result = RGAPS_STAGE_CONTINUE;
	sw->why[0] = '\0';
	sw->w.why = sw->why;
	sw->w.whylen = sizeof(sw->why);
	sw->w.done = swork_async_done;
	sw->w.topic = sw->st->t->cfg.name;
	sw->job.run = swork_run;
	sw->job.manual = true; /* an ASYNC stage finishes it later */
	sw->job.done.fn = swork_done;
	rgapsd_worker_submit(&rt->stage_pool, &sw->job);
}
