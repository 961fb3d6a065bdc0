/*
 * Who may see, attach to and create which topic (docs/CONFIG.md):
 * decided from the client's socket credentials (uid, primary gid and the
 * supplementary groups the control socket read with SO_PEERGROUPS) and from
 * the configuration the topic has, or would get if an attach created it. So
 * everything is settled before anything is created: a user refused on a
 * topic leaves nothing behind, and a user's topics count against its quota.
 *
 * The request handlers (requests.c) call in here; this file reads the topic
 * table (topics.c) and is never called by it: the limits on creating a topic
 * at all (create_topics, max_topics), which bind peers' set-ups too, are the
 * topic table's own.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"

void rgapsd_client_identify(struct rgapsd_conn *conn, struct rgapsd_client_id *id)
{
	const struct ucred *cred = rgapsd_conn_cred(conn);

	id->uid = cred->uid;
	id->gid = cred->gid;
	id->groups = rgapsd_conn_groups(conn, &id->ngroups);
}

static bool in_group(const struct rgapsd_client_id *id, gid_t gid)
{
	if (id->gid == gid)
		return true;
	for (uint32_t i = 0; i < id->ngroups; i++)
		if (id->groups[i] == gid)
			return true;
	return false;
}

/* Root and rgapsd's own user: bound by no allow-list and no per-user quota. */
static bool privileged(const struct rgapsd_client_id *id)
{
	return id->uid == 0 || id->uid == geteuid();
}

bool rgapsd_sees_all(const struct rgapsd_client_id *id)
{
	return privileged(id) || in_group(id, getegid());
}

bool rgapsd_allows(const struct rgaps_topic_config *cfg, const struct rgapsd_client_id *id)
{
	if (cfg->nallowed_uids == 0 && cfg->nallowed_gids == 0)
		return true;
	if (privileged(id))
		return true;
	for (uint32_t i = 0; i < cfg->nallowed_uids; i++)
		if (cfg->allowed_uids[i] == id->uid)
			return true;
	for (uint32_t i = 0; i < cfg->nallowed_gids; i++)
		if (in_group(id, cfg->allowed_gids[i]))
			return true;
	return false;
}

const struct rgaps_topic_config *rgapsd_config_of(const struct rgapsd *d, const char *name,
						   struct rgapsd_topic **t_p)
{
	const struct rgaps_topic_config *tc;

	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		if (strcmp(t->cfg.name, name) == 0) {
			*t_p = t;
			return &t->cfg;
		}
	}
	*t_p = NULL;
	tc = rgapsd_topic_configured(d, name);
	return tc ? tc : &d->cfg.topic_defaults;
}

/*
 * Where a client cannot create topics (create_topics "configured"), a topic that
 * does not exist and one it may not attach to get one answer, not_found, and one
 * count, so that a name tells a client nothing about a topic it may not see. The
 * debug log keeps the reason (why); the refusal itself is logged as any other.
 */
static int refuse_unseen(struct rgapsd *d, const char *name, const struct rgapsd_client_id *id,
			 const char *why, char *err, size_t errlen)
{
	d->refused.attach_denied++;
	rgaps_debug("uid %u on topic '%s': %s; answered as if there were no such topic",
		    (unsigned)id->uid, name, why);
	snprintf(err, errlen, "no topic '%s' that uid %u may attach to", name, (unsigned)id->uid);
	return -ENOENT;
}

int rgapsd_attach_admit(struct rgapsd *d, const char *name, const struct rgapsd_client_id *id,
			 struct rgapsd_topic **t_p, char *err, size_t errlen)
{
	const struct rgaps_topic_config *cfg = rgapsd_config_of(d, name, t_p);
	bool known = *t_p || rgapsd_topic_configured(d, name);
	uint32_t mine = 0;

	if (d->cfg.create_topics == RGAPSD_CREATE_CONFIGURED && !rgapsd_sees_all(id)) {
		if (!known)
			return refuse_unseen(d, name, id, "not configured", err, errlen);
		if (!rgapsd_allows(cfg, id))
			return refuse_unseen(d, name, id, "not on its allow-list", err, errlen);
	}
	if (!rgapsd_allows(cfg, id)) {
		d->refused.attach_denied++;
		snprintf(err, errlen, "uid %u gid %u is not allowed on topic '%s'",
			 (unsigned)id->uid, (unsigned)id->gid, name);
		return -EACCES;
	}
	if (*t_p || privileged(id) || rgapsd_topic_configured(d, name))
		return 0;
	for (const struct rgapsd_topic *t = d->topics; t; t = t->next)
		mine += t->adhoc && t->has_creator && t->creator == id->uid;
	if (mine >= d->cfg.max_topics_per_user) {
		d->refused.topics_refused_quota++;
		snprintf(err, errlen,
			 "uid %u has created max_topics_per_user (%u) topics; topic '%s' is not "
			 "created", (unsigned)id->uid, d->cfg.max_topics_per_user, name);
		return -EDQUOT;
	}
	return 0;
}
