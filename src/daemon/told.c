/*
 * What a client has been told about a topic's members, and the diff since: the
 * "members", "remove", "limits" and "more" of an attach reply and of every
 * sync reply (docs/PROTOCOL.md), with an fd of each new member's region (and
 * pool) that serves as the client does. Read-only fds unless the member is
 * the client's own (members.c makes them).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"

int rgapsd_told_init(struct rgapsd_told *told, const struct rgapsd_topic *t,
		      enum rgapsd_member_kind watch)
{
	told->n = watch == RGAPSD_MEMBER_PUB ? t->lim.max_publishers : t->lim.max_subscribers;
	told->gen = calloc(told->n, sizeof(*told->gen));
	told->limit = calloc(told->n, sizeof(*told->limit));
	if (!told->gen || !told->limit) {
		rgapsd_told_free(told);
		return -ENOMEM;
	}
	return 0;
}

void rgapsd_told_free(struct rgapsd_told *told)
{
	free(told->gen);
	free(told->limit);
	told->gen = told->limit = NULL;
	told->n = 0;
}

static void add_u64(cJSON *o, const char *key, uint64_t v)
{
	/* Exact in a double up to 2^53: sequence numbers and generations stay below. */
	cJSON_AddNumberToObject(o, key, (double)RGAPS_MIN(v, (1ull << 53)));
}

int rgapsd_told_diff(struct rgapsd_told *told, struct rgapsd_topic *t,
		      enum rgapsd_member_kind watch, int32_t serve, cJSON *reply, int *fds,
		      int *nfds_p, int max_fds)
{
	cJSON *add = cJSON_AddArrayToObject(reply, "members");
	cJSON *rem = cJSON_AddArrayToObject(reply, "remove");
	cJSON *lim = cJSON_AddArrayToObject(reply, "limits");
	uint32_t n;
	struct rgapsd_member **tab = rgapsd_member_table(t, watch, &n);
	int need = watch == RGAPSD_MEMBER_PUB ? 2 : 1;
	bool more = false;

	rgaps_require(n == told->n);
	for (uint32_t i = 0; i < n; i++) {
		struct rgapsd_member *m = tab[i];
		uint64_t g;
		cJSON *o;

		if (m && m->serve != serve)
			m = NULL; /* another GPU's streams, or readers of them: not ours to know */
		g = m ? m->gen : 0;

		if (told->gen[i] && told->gen[i] != g) {
			o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "slot", i);
			add_u64(o, "gen", told->gen[i]);
			cJSON_AddItemToArray(rem, o);
			told->gen[i] = 0;
		}
		if (!g)
			continue;
		if (told->gen[i] == 0) {
			int fd, pfd = -1;

			if (*nfds_p + need > max_fds) {
				more = true;
				continue;
			}
			fd = rgapsd_member_share_fd(m, false, false);
			if (fd < 0)
				return fd;
			if (need == 2) {
				pfd = rgapsd_member_share_fd(m, true, false);
				if (pfd < 0) {
					close(fd);
					return pfd;
				}
			}
			o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "slot", i);
			add_u64(o, "gen", g);
			cJSON_AddNumberToObject(o, "fd", *nfds_p);
			fds[(*nfds_p)++] = fd;
			if (pfd >= 0) {
				cJSON_AddNumberToObject(o, "pool_fd", *nfds_p);
				cJSON_AddNumberToObject(o, "mem_flags", m->pool.flags);
				cJSON_AddNumberToObject(o, "pool_device", m->pool_dev);
				/* By PCI address too: the client's ordinals may differ. */
				if (rgapsd_gpu_pci(t, m->pool_dev))
					cJSON_AddStringToObject(o, "pool_pci",
								rgapsd_gpu_pci(t, m->pool_dev));
				fds[(*nfds_p)++] = pfd;
			}
			if (m->state == RGAPSD_MEMBER_DRAINING)
				add_u64(o, "limit", m->limit);
			cJSON_AddItemToArray(add, o);
			told->gen[i] = g;
			told->limit[i] = m->limit;
		} else if (told->limit[i] != m->limit) {
			o = cJSON_CreateObject();
			cJSON_AddNumberToObject(o, "slot", i);
			add_u64(o, "gen", g);
			add_u64(o, "limit", m->limit);
			cJSON_AddItemToArray(lim, o);
			told->limit[i] = m->limit;
		}
	}
	cJSON_AddBoolToObject(reply, "more", more);
	return 0;
}
