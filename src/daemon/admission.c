/*
 * Pending connections and their bounds (admission.h).
 */
#include "admission.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

struct rgapsd_pending {
	void *key;
	struct sockaddr_storage src;
	uint64_t since_ms;
	bool configured;
};

/* The IP address of sa (an IPv4-mapped IPv6 address as the IPv4 one): 4, 16 or 0 bytes. */
static size_t addr_ip(const struct sockaddr *sa, const uint8_t **ip)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (sa->sa_family == AF_INET) {
		*ip = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		*ip = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		if (memcmp(*ip, v4mapped, sizeof(v4mapped)) == 0) {
			*ip += sizeof(v4mapped);
			return 4;
		}
		return 16;
	}
	return 0;
}

bool rgapsd_addr_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
	const uint8_t *ia = NULL, *ib = NULL;
	size_t la = addr_ip(a, &ia), lb = addr_ip(b, &ib);

	return la && la == lb && memcmp(ia, ib, la) == 0;
}

static void addr_name(const struct sockaddr *sa, char *buf, size_t len)
{
	if (sa->sa_family == AF_INET6)
		uv_ip6_name((const struct sockaddr_in6 *)sa, buf, len);
	else if (sa->sa_family == AF_INET)
		uv_ip4_name((const struct sockaddr_in *)sa, buf, len);
	else
		snprintf(buf, len, "?");
}

void rgapsd_admission_init(struct rgapsd_admission *a, const char *what, uint32_t max,
			   uint32_t max_per_source)
{
	memset(a, 0, sizeof(*a));
	a->what = what;
	a->max = max;
	a->max_per_source = max_per_source;
}

void rgapsd_admission_fini(struct rgapsd_admission *a)
{
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

static void forget(struct rgapsd_admission *a, uint32_t i)
{
	a->v[i] = a->v[--a->n];
	a->st.pending = a->n;
}

/*
 * The oldest pending connection from sa's host (sa non-NULL), else the oldest
 * from a stranger's address, else (any) the oldest of all: its index, or
 * UINT32_MAX. *n_src_p counts those from sa's host.
 */
static uint32_t oldest(const struct rgapsd_admission *a, const struct sockaddr *sa, bool any,
		       uint32_t *n_src_p)
{
	uint32_t best = UINT32_MAX, best_any = UINT32_MAX, n = 0;

	for (uint32_t i = 0; i < a->n; i++) {
		const struct rgapsd_pending *p = &a->v[i];

		if (best_any == UINT32_MAX || p->since_ms < a->v[best_any].since_ms)
			best_any = i;
		if (sa ? rgapsd_addr_same_host((const struct sockaddr *)&p->src, sa)
		       : !p->configured) {
			n += sa != NULL;
			if (best == UINT32_MAX || p->since_ms < a->v[best].since_ms)
				best = i;
		}
	}
	if (n_src_p)
		*n_src_p = n;
	return best != UINT32_MAX ? best : any ? best_any : UINT32_MAX;
}

static void refuse(struct rgapsd_admission *a, uint64_t *counter, const struct sockaddr *sa,
		   const char *why)
{
	char ip[64];

	(*counter)++;
	addr_name(sa, ip, sizeof(ip));
	rgaps_log_limited(&a->rl, RGAPS_LOG_WARN,
			  "%s: a connection from %s refused: %s (configured peers' addresses are "
			  "still admitted)",
			  a->what, ip, why);
}

int rgapsd_admission_admit(struct rgapsd_admission *a, void *key, const struct sockaddr *sa,
			   bool configured, uint64_t now_ms, void **victim_p)
{
	uint32_t nsrc, victim;
	char why[128];

	*victim_p = NULL;
	if (a->n == a->cap) { /* first: a refusal for lack of memory evicts nobody */
		uint32_t cap = a->cap ? 2 * a->cap : 16;
		struct rgapsd_pending *v = realloc(a->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		a->v = v;
		a->cap = cap;
	}
	victim = oldest(a, sa, false, &nsrc);
	if (nsrc < a->max_per_source)
		victim = UINT32_MAX;
	if (victim != UINT32_MAX && !configured) {
		snprintf(why, sizeof(why), "%u connections from its address already wait",
			 (unsigned)nsrc);
		refuse(a, &a->st.refused_source, sa, why);
		return -EBUSY;
	}
	if (victim == UINT32_MAX && a->n >= a->max) {
		if (!configured) {
			snprintf(why, sizeof(why), "%u connections already wait", (unsigned)a->n);
			refuse(a, &a->st.refused, sa, why);
			return -EBUSY;
		}
		victim = oldest(a, NULL, true, NULL);
	}
	if (victim != UINT32_MAX) {
		a->st.evicted++;
		*victim_p = a->v[victim].key;
		forget(a, victim);
	}
	a->v[a->n] =
		(struct rgapsd_pending){ .key = key, .since_ms = now_ms, .configured = configured };
	memcpy(&a->v[a->n].src, sa,
	       sa->sa_family == AF_INET6  ? sizeof(struct sockaddr_in6)
	       : sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr));
	a->n++;
	a->st.pending = a->n;
	return 0;
}

void rgapsd_admission_settled(struct rgapsd_admission *a, void *key, const char *why)
{
	for (uint32_t i = 0; i < a->n; i++) {
		char ip[64];

		if (a->v[i].key != key)
			continue;
		if (why) {
			a->st.dropped++;
			addr_name((const struct sockaddr *)&a->v[i].src, ip, sizeof(ip));
			rgaps_log_limited(&a->rl, RGAPS_LOG_WARN,
					  "%s: connection from %s closed: %s", a->what, ip, why);
		}
		forget(a, i);
		return;
	}
}
