/*
 * rgapsd's `stats` reply in the Prometheus text exposition format (version
 * 0.0.4): what rgapsd serves at /metrics (metrics_listen, src/daemon/metrics.c)
 * and `rgaps stats --prometheus` prints, from one renderer.
 *
 * Each metric is declared once, in a table per scope (daemon, topic,
 * subscriber slot, peer, data link): name, type, help, and where its value is
 * in the JSON. A family's samples must be contiguous, so the writer walks the
 * table first and the objects second. Values absent from a reply (an older
 * rgapsd, a link that is down) are left out, never written as 0. Every sample
 * names the daemon with the label rgaps_instance (its shared-memory instance):
 * "instance" is Prometheus's own label, the target it scraped.
 */
#include "prometheus.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

double rgaps__json_num(const cJSON *o, const char *path)
{
	char key[64];

	while (o && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);

		if (n >= sizeof(key))
			return NAN;
		memcpy(key, path, n);
		key[n] = '\0';
		o = cJSON_GetObjectItemCaseSensitive(o, key);
		path += n + (dot ? 1 : 0);
	}
	if (cJSON_IsNumber(o))
		return o->valuedouble;
	if (cJSON_IsBool(o))
		return cJSON_IsTrue(o) ? 1 : 0;
	return NAN;
}

const char *rgaps__json_str(const cJSON *o, const char *key)
{
	const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

struct metric {
	const char *name; /* without the rgaps_ prefix */
	const char *type; /* "counter" or "gauge" */
	const char *help;
	const char *path;  /* dotted path of the number in the scope's object */
	double scale;	   /* value x scale (units to seconds); 0 means 1 */
};

/* One object of a scope and the labels that name it. */
struct labeled {
	const cJSON *obj;
	char labels[512];
};

static const struct metric daemon_metrics[] = {
	{ "daemon_uptime_seconds", "gauge", "Seconds since rgapsd started.", "uptime_s" },
	{ "daemon_connections", "gauge", "Client connections open now.", "connections" },
	{ "daemon_connections_total", "counter", "Client connections accepted.",
	  "connections_total" },
	{ "daemon_requests_total", "counter", "Control requests served.", "requests" },
	{ "daemon_request_errors_total", "counter", "Control requests refused.",
	  "request_errors" },
	{ "daemon_topics", "gauge", "Topics in the topic table.", "topics" },
	{ "daemon_connections_refused_total", "counter",
	  "Connections refused at max_connections.", "connections_refused" },
	{ "daemon_connections_refused_user_total", "counter",
	  "Connections refused at max_connections_per_user.", "connections_refused_user" },
	{ "daemon_idle_closed_total", "counter",
	  "Unattached connections closed after idle_timeout_ms without a request.",
	  "idle_closed" },
	{ "daemon_frame_timeouts_total", "counter",
	  "Connections closed for a frame not complete within frame_timeout_ms.",
	  "frame_timeouts" },
	{ "daemon_stalled_closed_total", "counter",
	  "Connections closed for leaving replies unread for idle_timeout_ms.", "stalled_closed" },
	{ "daemon_read_pauses_total", "counter",
	  "Times a connection was not read for its unread replies (max_unsent_replies).",
	  "read_pauses" },
	{ "daemon_paused_connections", "gauge",
	  "Connections not read now for their unread replies.", "paused_connections" },
	{ "daemon_unsent_bytes", "gauge", "Bytes of replies queued and not yet sent.",
	  "unsent_bytes" },
	{ "daemon_frame_bytes", "gauge", "Bytes of buffers of request frames arriving.",
	  "frame_bytes" },
	{ "daemon_attach_denied_total", "counter", "Attaches refused by an allow-list.",
	  "attach_denied" },
	{ "daemon_topics_refused_max_total", "counter", "Topics not created: max_topics.",
	  "topics_refused_max" },
	{ "daemon_topics_refused_quota_total", "counter",
	  "Topics not created: max_topics_per_user.", "topics_refused_quota" },
	{ "daemon_topics_refused_unconfigured_total", "counter",
	  "Topics not created: not configured, with create_topics \"configured\".",
	  "topics_refused_unconfigured" },
	{ "daemon_topics_removed_idle_total", "counter",
	  "Topics from the defaults removed after topic_idle_s unused.", "topics_removed_idle" },
	{ "daemon_gpu_pools_refused_total", "counter",
	  "Cuda pools refused: they would leave less than gpu_reserve free.",
	  "gpu_pools_refused" },
	{ "daemon_log_suppressed_total", "counter",
	  "Log records of refusals left out by the rate limit.", "log_suppressed" },
	{ "daemon_loop_lag_seconds", "gauge", "How late the loop's last lag probe ran.",
	  "loop.lag_ms", 1e-3 },
	{ "daemon_loop_lag_p99_seconds", "gauge", "99th percentile of the loop's lag probes.",
	  "loop.lag_p99_ms", 1e-3 },
	{ "daemon_loop_lag_max_seconds", "gauge", "Largest lateness of a lag probe since start.",
	  "loop.lag_max_ms", 1e-3 },
	{ "daemon_loop_stalls_total", "counter", "Lag probes over 100 ms late.", "loop.stalls" },
	{ "daemon_loop_stalled_seconds_total", "counter",
	  "Time the loop stood still (lateness of probes over 10 ms late, summed).",
	  "loop.stalled_ms", 1e-3 },
	{ "daemon_loop_turn_cpu_max_seconds", "gauge",
	  "CPU time of the loop's longest turn: its longest piece of work.",
	  "loop.turn_cpu_max_ms", 1e-3 },
};

/* The peer port (the "peers" object of stats, without its sessions). */
static const struct metric listener_metrics[] = {
	{ "peers_accepted_total", "counter", "Connections accepted on the peer port.",
	  "accepted" },
	{ "peers_auth_failures_total", "counter", "Handshakes that failed the key.",
	  "auth_failures" },
	{ "peers_protocol_errors_total", "counter", "Peer connections closed for a protocol error.",
	  "protocol_errors" },
	{ "peers_pending_refused_total", "counter",
	  "Strangers' connections closed at once: peer_max_pending.", "pending_refused" },
	{ "peers_pending_refused_source_total", "counter",
	  "Strangers' connections closed at once: peer_max_pending_per_source.",
	  "pending_refused_source" },
	{ "peers_pending_evicted_total", "counter",
	  "Pending connections closed to admit a configured peer's address.", "pending_evicted" },
	{ "peers_hello_timeouts_total", "counter",
	  "Connections closed without a whole HELLO within peer_hello_timeout_ms.",
	  "hello_timeouts" },
	{ "peers_stall_excused_total", "counter",
	  "Peer deadlines moved because this daemon's own loop stood still.", "stall_excused" },
};

/* Where the hosts come from (the "membership" object of "peers"), labelled by source. */
static const struct metric membership_metrics[] = {
	{ "membership_hosts", "gauge",
	  "Hosts known: registered under the etcd prefix, or the configured peers.", "hosts" },
	{ "membership_hosts_missing", "gauge",
	  "Hosts whose etcd key went while their session is up (waiting to register again).",
	  "hosts_missing" },
	{ "membership_live", "gauge", "1 while etcd is watched and the lease renewed.", "live" },
	{ "membership_unreachable_seconds", "gauge",
	  "Seconds since etcd stopped answering (0 while it answers).", "unreachable_s" },
	{ "membership_joined_total", "counter", "Hosts that appeared in etcd.", "joined" },
	{ "membership_left_total", "counter", "Hosts dropped: their key went.", "left" },
	{ "membership_outages_total", "counter", "Times etcd stopped answering.", "outages" },
	{ "membership_records_refused_total", "counter",
	  "Keys under the prefix refused (not a host record).", "records_refused" },
	{ "membership_etcd_requests_total", "counter", "Requests to etcd members (each try).",
	  "etcd.requests" },
	{ "membership_etcd_failures_total", "counter", "Tries no etcd member answered.",
	  "etcd.failures" },
	{ "membership_etcd_refusals_total", "counter", "Requests etcd answered with an error.",
	  "etcd.refusals" },
	{ "membership_etcd_watch_events_total", "counter", "Changes seen by the watch.",
	  "etcd.watch_events" },
	{ "membership_etcd_rtt_seconds", "gauge", "Round trip of the last answered request.",
	  "etcd.rtt_ms", 1e-3 },
	{ "membership_etcd_rtt_max_seconds", "gauge", "Longest round trip since start.",
	  "etcd.rtt_ms_max", 1e-3 },
};

static const struct metric topic_metrics[] = {
	{ "topic_subscribers", "gauge", "Subscribers attached on this host.", "subscribers" },
	{ "topic_publishers", "gauge", "Publishers attached on this host.", "publishers" },
	{ "topic_published_messages_total", "counter", "Messages published into the pool.",
	  "counters.published" },
	{ "topic_published_bytes_total", "counter", "Bytes published into the pool.",
	  "counters.published_bytes" },
	{ "topic_taken_messages_total", "counter", "Messages taken, summed over subscribers.",
	  "counters.taken" },
	{ "topic_released_messages_total", "counter", "Holds released by subscribers.",
	  "counters.released" },
	{ "topic_unrouted_messages_total", "counter", "Messages published with no subscriber.",
	  "counters.unrouted" },
	{ "topic_dropped_messages_total", "counter",
	  "Messages forced out of the queue while a subscriber lagged (drop_oldest).",
	  "counters.dropped" },
	{ "topic_subscriber_drops_total", "counter",
	  "Messages skipped for lagging subscribers, summed over subscribers.",
	  "counters.drops_total" },
	{ "topic_full_waits_total", "counter", "Times a publisher waited for room.",
	  "counters.full_waits" },
	{ "topic_publish_timeouts_total", "counter", "Publisher waits that timed out.",
	  "counters.timeouts" },
	{ "topic_reclaimed_holds_total", "counter", "Holds released for dead subscribers.",
	  "counters.reclaimed_holds" },
	{ "topic_reclaimed_loans_total", "counter", "Loans freed for dead publishers.",
	  "counters.reclaimed_loans" },
	{ "topic_bad_regions_total", "counter",
	  "Shared memory regions of clients refused as malformed (the client is disconnected).",
	  "counters.bad_regions" },
	{ "topic_pool_size_bytes", "gauge", "Size of the topic's shared pool.", "pool.size" },
	{ "topic_pool_used_bytes", "gauge", "Bytes of the pool in use.", "pool.used_bytes" },
	{ "topic_pool_largest_free_bytes", "gauge", "Largest free block of the pool.",
	  "pool.largest_free" },
	{ "topic_pool_fragmentation_ratio", "gauge",
	  "1 - largest free block / free bytes (0: one free range).", "pool.fragmentation" },
	{ "topic_queue_depth", "gauge", "Entries of the message queue.", "queue.depth" },
	{ "topic_queue_used", "gauge", "Entries of the message queue in use.", "queue.used" },
	{ "topic_remote_messages_total", "counter",
	  "Messages received from peer hosts and published here.", "from_peers.messages" },
	{ "topic_remote_bytes_total", "counter",
	  "Bytes received from peer hosts and published here.", "from_peers.bytes" },
	{ "topic_remote_refused_total", "counter",
	  "Messages from peer hosts refused here (counted as gaps).", "from_peers.refused" },
	{ "topic_remote_gaps_total", "counter",
	  "Messages lost between hosts, seen as sequence gaps.", "from_peers.gaps" },
	{ "topic_latency_samples_total", "counter",
	  "Takes whose publish-to-take latency was recorded.", "latency_us.count" },
	{ "topic_latency_p50_seconds", "gauge",
	  "Median publish-to-take latency since the topic was created.", "latency_us.p50",
	  1e-6 },
	{ "topic_latency_p99_seconds", "gauge",
	  "99th percentile publish-to-take latency since the topic was created.",
	  "latency_us.p99", 1e-6 },
	{ "topic_latency_p999_seconds", "gauge",
	  "99.9th percentile publish-to-take latency since the topic was created.",
	  "latency_us.p999", 1e-6 },
	{ "topic_latency_skewed_total", "counter",
	  "Takes stamped in the future by another host's clock (counted as 0 s).",
	  "latency_us.skewed" },
};

static const struct metric sub_metrics[] = {
	{ "subscriber_taken_messages_total", "counter", "Messages this subscriber took.",
	  "taken" },
	{ "subscriber_lag_messages", "gauge", "Messages published that it has not taken yet.",
	  "lag" },
	{ "subscriber_drops_total", "counter", "Messages skipped because it lagged.", "drops" },
	{ "subscriber_holds", "gauge", "Messages it holds now.", "holds" },
	{ "subscriber_latency_p50_seconds", "gauge", "Its median publish-to-take latency.",
	  "latency_us.p50", 1e-6 },
	{ "subscriber_latency_p99_seconds", "gauge",
	  "Its 99th percentile publish-to-take latency.", "latency_us.p99", 1e-6 },
};

static const struct metric peer_metrics[] = {
	{ "peer_up", "gauge", "1 while the authenticated session with the peer is up.", "up" },
	{ "peer_sessions_total", "counter", "Sessions established with the peer.", "sessions" },
	{ "peer_rtt_seconds", "gauge", "Round-trip time of the last keepalive.", "rtt_ms",
	  1e-3 },
	{ "peer_link_downs_total", "counter", "Data links to the peer lost.", "link_downs" },
	{ "peer_setup_refusals_total", "counter", "Topic set-ups the peer refused.",
	  "setup_refusals" },
	{ "peer_hostile_total", "counter", "Sessions dropped for hostile input.", "hostile" },
};

static const struct metric link_metrics[] = {
	{ "link_records_sent_total", "counter", "Records sent on the data link.",
	  "records_sent" },
	{ "link_bytes_sent_total", "counter", "Bytes sent on the data link.", "bytes_sent" },
	{ "link_records_landed_total", "counter", "Records landed from the data link.",
	  "records_landed" },
	{ "link_bytes_landed_total", "counter", "Bytes landed from the data link.",
	  "bytes_landed" },
	{ "link_send_credit_stalls_total", "counter", "Posts refused for lack of send credits.",
	  "send_credit_stalls" },
	{ "link_cq_overflows_total", "counter", "Completion queue overflows (must stay 0).",
	  "cq_overflows" },
	{ "link_records_late_total", "counter",
	  "Records that landed after their ring was torn down (dropped).", "records_late" },
};

/* name="value" with \, " and newline escaped, appended to buf. */
static void add_label(char *buf, size_t len, const char *name, const char *value)
{
	size_t off = strlen(buf);

	off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s%s=\"", off ? "," : "",
				name);
	for (const char *v = value ? value : ""; *v && off + 3 < len; v++) {
		if (*v == '\\' || *v == '"')
			buf[off++] = '\\', buf[off++] = *v;
		else if (*v == '\n')
			buf[off++] = '\\', buf[off++] = 'n';
		else
			buf[off++] = *v;
	}
	if (off + 2 <= len) {
		buf[off++] = '"';
		buf[off] = '\0';
	}
}

static void write_family(FILE *out, const struct metric *m, const struct labeled *objs,
			 size_t n)
{
	bool header = false;

	for (size_t i = 0; i < n; i++) {
		double v = rgaps__json_num(objs[i].obj, m->path);

		if (isnan(v))
			continue;
		if (!header) {
			fprintf(out, "# HELP rgaps_%s %s\n# TYPE rgaps_%s %s\n", m->name, m->help,
				m->name, m->type);
			header = true;
		}
		v *= m->scale ? m->scale : 1;
		if (v == floor(v) && fabs(v) < 1e15)
			fprintf(out, "rgaps_%s{%s} %.0f\n", m->name, objs[i].labels, v);
		else
			fprintf(out, "rgaps_%s{%s} %.9g\n", m->name, objs[i].labels, v);
	}
}

static void write_scope(FILE *out, const struct metric *ms, size_t nms,
			const struct labeled *objs, size_t n)
{
	for (size_t k = 0; k < nms; k++)
		write_family(out, &ms[k], objs, n);
}

/* The objects of one scope, as many as the reply holds (10,000 topics and more). */
struct objs {
	struct labeled *v;
	size_t n, cap;
	bool oom;
};

/* objs += obj, labelled rgaps_instance="inst", then each name, value pair of kv (NULL-ended). */
static void add_obj(struct objs *os, const cJSON *obj, const char *inst, const char *const *kv)
{
	struct labeled *o;

	if (os->n == os->cap) {
		size_t cap = os->cap ? os->cap * 2 : 64;
		struct labeled *v = realloc(os->v, cap * sizeof(*v));

		if (!v) {
			os->oom = true;
			return;
		}
		os->v = v;
		os->cap = cap;
	}
	o = &os->v[os->n++];
	o->obj = obj;
	o->labels[0] = '\0';
	add_label(o->labels, sizeof(o->labels), "rgaps_instance", inst);
	for (; kv[0] && kv[1]; kv += 2)
		add_label(o->labels, sizeof(o->labels), kv[0], kv[1]);
}

/* Write the scope's families and empty it for the next scope. */
static void flush_scope(FILE *out, const struct metric *ms, size_t nms, struct objs *os)
{
	write_scope(out, ms, nms, os->v, os->n);
	os->n = 0;
}

int rgaps__stats_prometheus(const cJSON *reply, FILE *out)
{
	struct objs os = { 0 };
	const cJSON *daemon = cJSON_GetObjectItemCaseSensitive(reply, "daemon");
	const cJSON *topics = cJSON_GetObjectItemCaseSensitive(reply, "topics");
	const cJSON *peers = cJSON_GetObjectItemCaseSensitive(reply, "peers");
	const cJSON *sessions = cJSON_GetObjectItemCaseSensitive(peers, "sessions");
	const char *inst = rgaps__json_str(daemon, "instance");
	const cJSON *t, *s;
	int rc;

	if (!cJSON_IsObject(daemon))
		return -1;
	if (!inst)
		inst = "";
	add_obj(&os, daemon, inst, (const char *const[]){ NULL });
	flush_scope(out, daemon_metrics, sizeof(daemon_metrics) / sizeof(daemon_metrics[0]), &os);

	cJSON_ArrayForEach(t, topics)
	{
		const char *name = rgaps__json_str(t, "name");

		if (name)
			add_obj(&os, t, inst, (const char *const[]){ "topic", name, NULL });
	}
	flush_scope(out, topic_metrics, sizeof(topic_metrics) / sizeof(topic_metrics[0]), &os);

	cJSON_ArrayForEach(t, topics)
	{
		const char *name = rgaps__json_str(t, "name");

		cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(t, "subscriber_slots"))
		{
			char slot[32], pid[32];

			snprintf(slot, sizeof(slot), "%.0f", rgaps__json_num(s, "slot"));
			snprintf(pid, sizeof(pid), "%.0f", rgaps__json_num(s, "pid"));
			if (name)
				add_obj(&os, s, inst,
					(const char *const[]){ "topic", name, "slot", slot, "pid",
							       pid, NULL });
		}
	}
	flush_scope(out, sub_metrics, sizeof(sub_metrics) / sizeof(sub_metrics[0]), &os);

	if (cJSON_IsObject(peers)) {
		const cJSON *ms = cJSON_GetObjectItemCaseSensitive(peers, "membership");

		add_obj(&os, peers, inst, (const char *const[]){ NULL });
		flush_scope(out, listener_metrics,
			    sizeof(listener_metrics) / sizeof(listener_metrics[0]), &os);
		if (cJSON_IsObject(ms) && rgaps__json_str(ms, "source"))
			add_obj(&os, ms, inst,
				(const char *const[]){ "source", rgaps__json_str(ms, "source"), NULL });
		flush_scope(out, membership_metrics,
			    sizeof(membership_metrics) / sizeof(membership_metrics[0]), &os);
	}
	cJSON_ArrayForEach(s, sessions)
	{
		const char *name = rgaps__json_str(s, "name");

		if (name)
			add_obj(&os, s, inst, (const char *const[]){ "peer", name, NULL });
	}
	flush_scope(out, peer_metrics, sizeof(peer_metrics) / sizeof(peer_metrics[0]), &os);

	cJSON_ArrayForEach(s, sessions)
	{
		const char *name = rgaps__json_str(s, "name");
		const cJSON *l;

		cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(s, "links"))
		{
			if (name && l->string)
				add_obj(&os, l, inst,
					(const char *const[]){ "peer", name, "transport",
							       l->string, NULL });
		}
	}
	flush_scope(out, link_metrics, sizeof(link_metrics) / sizeof(link_metrics[0]), &os);
	rc = ferror(out) || os.oom ? -1 : 0;
	free(os.v);
	return rc;
}
