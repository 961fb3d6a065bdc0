/*
 * rgapsd's topic table: topics from topics.d are configured at start but
 * created (a header segment) on first attach, like topics absent from the
 * configuration, which are made from the daemon's defaults. A topic lives
 * until the daemon stops or, one made from the defaults, until it has been
 * unused for topic_idle_s (the sweep, every 100 ms). Its memory backend is
 * chosen once, at creation ("auto": cuda when a GPU is usable, else host,
 * with the reason logged).
 * Its members - one per attachment, with their regions and pools - are in
 * members.c.
 *
 * Several GPUs (docs/GPU.md, "Every GPU of a host"): a topic's pools live on
 * its device; a client on another GPU of the host reads them in place (peer
 * access) or reads a replica on its own GPU that rgapsd keeps (replicator.c),
 * as gpu_fanout says or, with "auto", as the link between the two GPUs and
 * the message size suggest. Decided per GPU at its first attach, logged with
 * the reason; a GPU that cannot be served is refused at attach.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../common/futex.h"
#include "../common/log.h"
#include "../common/shm.h"
#include "daemon.h"

static struct rgaps_loaded_plugin *memory_plugin(struct rgapsd *d, const char *name, char *err,
						 size_t errlen)
{
	struct rgaps_plugin_env env;
	struct rgaps_loaded_plugin *lp;
	int r;

	for (uint32_t i = 0; i < d->nmem_plugins; i++)
		if (strcmp(d->mem_plugins[i]->name, name) == 0)
			return d->mem_plugins[i];
	if (d->nmem_plugins == RGAPSD_MAX_MEMORY_PLUGINS) {
		snprintf(err, errlen, "too many memory plugins");
		return NULL;
	}
	r = rgaps__plugin_load(d->plugin_dir, RGAPS_PLUGIN_MEMORY, name, &lp, err, errlen);
	if (r)
		return NULL;
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, d->loop);
	r = lp->ops.memory.init(&env, &lp->ctx);
	if (r) {
		snprintf(err, errlen, "memory plugin '%s': init failed: %s", name, strerror(-r));
		rgaps__plugin_unload(lp);
		return NULL;
	}
	rgaps_info("loaded memory plugin '%s' from %s", name, lp->path);
	d->mem_plugins[d->nmem_plugins++] = lp;
	return lp;
}

/* Resolve a topic's memory plugin: its name, or "auto" (the registry's usable one of highest
 * priority); logs what was picked and why. */
static struct rgaps_loaded_plugin *pick_memory(struct rgapsd *d, const struct rgaps_topic_config *tc,
					       char *err, size_t errlen)
{
	struct rgaps_loaded_plugin *lp;
	char why[256] = "";

	if (strcmp(tc->memory, "auto") != 0) {
		lp = memory_plugin(d, tc->memory, err, errlen);
		if (!lp)
			return NULL;
		if (lp->ops.memory.probe(lp->ctx, tc->device, why, sizeof(why)) != 0) {
			snprintf(err, errlen, "memory '%s' unusable for topic '%s': %s", tc->memory,
				 tc->name, why);
			return NULL;
		}
		return lp;
	}
	for (uint32_t i = 0; i < d->reg.n[RGAPS_PLUGIN_MEMORY]; i++) {
		const struct rgaps_plugin_info *pi = &d->reg.of[RGAPS_PLUGIN_MEMORY][i];

		if (!pi->priority)
			continue; /* only when named */
		lp = memory_plugin(d, pi->name, why, sizeof(why));
		if (lp && lp->ops.memory.probe(lp->ctx, tc->device, why, sizeof(why)) == 0) {
			rgaps_info("topic '%s': memory auto -> %s (device %d)", tc->name, pi->name,
				   tc->device);
			return lp;
		}
		rgaps_info("topic '%s': memory auto: %s not usable: %s", tc->name, pi->name, why);
	}
	snprintf(err, errlen, "no memory plugin in %s is usable for topic '%s'", d->plugin_dir,
		 tc->name);
	return NULL;
}

/* What the backend's pools hold: host memory only for the host backend. */
static uint32_t mem_kind_of(const struct rgaps_loaded_plugin *lp)
{
	return strcmp(lp->name, "host") == 0 ? RGAPS_MEM_HOST : RGAPS_MEM_CUDA;
}

const struct rgaps_topic_config *rgapsd_topic_configured(const struct rgapsd *d, const char *name)
{
	for (uint32_t i = 0; i < d->cfg.ntopics; i++)
		if (strcmp(d->cfg.topics[i].name, name) == 0)
			return &d->cfg.topics[i];
	return NULL;
}

/*
 * Peer access over PCIe pays off for small messages only: every subscriber's
 * read crosses the link, where a replica is copied across it once. Up to this
 * size "auto" reads in place over PCIe, above it replicates; over NVLink it
 * always reads in place. (Provisional: to be set from the multi-GPU benchmark,
 * docs/BENCHMARKS.md; the lent machines have NVLink.)
 */
#define PEER_PCIE_MAX_MESSAGE (1ull << 20)
#define REPLICATOR_IDLE_NS (2ull * 1000 * 1000 * 1000) /* no subscriber left: stop after */

static const char *link_name(uint8_t kind)
{
	switch (kind) {
	case RGAPS_MEM_LINK_NVLINK:
		return "NVLink";
	case RGAPS_MEM_LINK_PCIE:
		return "PCIe";
	case RGAPS_MEM_LINK_SELF:
		return "same GPU";
	default:
		return "no peer access";
	}
}

static bool serves(const struct rgapsd_topic *t, uint32_t g)
{
	if (!t->cfg.ndevices)
		return true;
	for (uint32_t i = 0; i < t->cfg.ndevices; i++)
		if (t->cfg.devices[i] == g)
			return true;
	return false;
}

/* The topology, once per topic, and the checks of "devices" against it. */
static int topic_gpus_init(struct rgapsd_topic *t, char *err, size_t errlen)
{
	struct rgaps_mem_topology *topo = calloc(1, sizeof(*topo));
	char line[512] = "";
	size_t n = 0;

	if (!topo) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	topo->struct_size = sizeof(*topo);
	if (t->mem->ops.memory.topology(t->mem->ctx, topo) != 0 || topo->ndevices == 0 ||
	    topo->ndevices > RGAPS_MEM_MAX_DEVICES) {
		free(topo); /* no devices: one pool for everyone, as on a host topic */
		return 0;
	}
	if (t->cfg.ndevices && !serves(t, (uint32_t)t->cfg.device)) {
		snprintf(err, errlen, "\"devices\" must hold the topic's \"device\" (%d), where "
			 "its pools live", (int)t->cfg.device);
		free(topo);
		return -EINVAL;
	}
	t->gpus = calloc(topo->ndevices, sizeof(*t->gpus));
	if (!t->gpus) {
		free(topo);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->topo = topo;
	if ((uint32_t)t->cfg.device < topo->ndevices) {
		t->gpus[t->cfg.device].role = RGAPSD_GPU_POOL;
		snprintf(t->gpus[t->cfg.device].why, sizeof(t->gpus[0].why),
			 "the topic's device: its pools live here");
	}
	for (uint32_t i = 0; i < t->cfg.ndevices; i++)
		if (t->cfg.devices[i] >= topo->ndevices)
			rgaps_warn("topic '%s': \"devices\" lists GPU %u, but only %u are visible",
				   t->cfg.name, t->cfg.devices[i], topo->ndevices);
	for (uint32_t g = 0; g < topo->ndevices && n + 64 < sizeof(line); g++)
		if (g != (uint32_t)t->cfg.device && (uint32_t)t->cfg.device < topo->ndevices)
			n += (size_t)snprintf(line + n, sizeof(line) - n, "%s GPU %u: %s", n ? ";" : "",
					      g, link_name(topo->link[g][t->cfg.device].kind));
	rgaps_info("topic '%s': %u GPU%s (links learned from %s), pools on GPU %d, gpu_fanout %s%s%s",
		   t->cfg.name, topo->ndevices, topo->ndevices == 1 ? "" : "s", topo->how,
		   (int)t->cfg.device, t->cfg.gpu_fanout, n ? "; to the pools from" : "", line);
	return 0;
}

/* Decide how GPU g (not the pool's) is served; err says why when it cannot be. */
static int gpu_decide(struct rgapsd_topic *t, uint32_t g, char *err, size_t errlen)
{
	struct rgapsd_gpu *gp = &t->gpus[g];
	uint32_t d = (uint32_t)t->cfg.device;
	const struct rgaps_mem_link *l = &t->topo->link[g][d];
	bool peer_ok = l->kind == RGAPS_MEM_LINK_NVLINK || l->kind == RGAPS_MEM_LINK_PCIE;
	char rank[32] = "";

	if (l->rank >= 0)
		snprintf(rank, sizeof(rank), ", performance rank %d", l->rank);
	if (strcmp(t->cfg.gpu_fanout, "peer") == 0) {
		if (!peer_ok) {
			snprintf(err, errlen, "GPU %u has no peer access to GPU %u, where the topic's "
				 "pools live, and gpu_fanout is \"peer\": set it to \"replicate\" "
				 "or \"auto\", or run on GPU %u", g, d, d);
			return -ENODEV;
		}
		gp->role = RGAPSD_GPU_PEER;
		snprintf(gp->why, sizeof(gp->why), "reads the pools on GPU %u in place over %s%s "
			 "(gpu_fanout peer)", d, link_name(l->kind), rank);
	} else if (strcmp(t->cfg.gpu_fanout, "replicate") == 0) {
		gp->role = RGAPSD_GPU_REPLICA;
		snprintf(gp->why, sizeof(gp->why), "a replica of each message copied once from "
			 "GPU %u (gpu_fanout replicate; link: %s)", d, link_name(l->kind));
	} else if (!peer_ok) {
		gp->role = RGAPSD_GPU_REPLICA;
		snprintf(gp->why, sizeof(gp->why), "a replica copied once from GPU %u through host "
			 "memory (auto: no peer access between the two)", d);
	} else if (l->kind == RGAPS_MEM_LINK_PCIE &&
		   t->cfg.max_message_size > PEER_PCIE_MAX_MESSAGE) {
		gp->role = RGAPSD_GPU_REPLICA;
		snprintf(gp->why, sizeof(gp->why), "a replica copied once from GPU %u (auto: PCIe "
			 "peer link%s; messages up to %llu MiB cost every reader a PCIe read, more "
			 "than one copy)", d, rank,
			 (unsigned long long)(t->cfg.max_message_size >> 20));
	} else {
		gp->role = RGAPSD_GPU_PEER;
		snprintf(gp->why, sizeof(gp->why), "reads the pools on GPU %u in place over %s%s "
			 "(auto)", d, link_name(l->kind), rank);
	}
	/* A pool that cannot be opened to g (cudaIpc sharing) makes peer access impossible. */
	if (gp->role == RGAPSD_GPU_PEER) {
		for (uint32_t k = 0; k < t->lim.max_publishers; k++) {
			struct rgapsd_member *p = t->pubs[k];
			int e;

			if (!p || p->serve != RGAPSD_SERVE_ORIGINAL)
				continue;
			e = t->mem->ops.memory.pool_grant(t->mem->ctx, &p->pool, (int32_t)g,
							  RGAPS_MEM_GRANT_READ);
			if (e == -ENOTSUP && strcmp(t->cfg.gpu_fanout, "auto") == 0) {
				gp->role = RGAPSD_GPU_REPLICA;
				snprintf(gp->why, sizeof(gp->why), "a replica copied once from GPU %u "
					 "(auto: the pools cannot be opened to another GPU, as "
					 "cudaIpc pools cannot)", d);
			} else if (e == -ENOTSUP) {
				gp->role = RGAPSD_GPU_UNSET;
				snprintf(err, errlen, "the topic's pools cannot be opened to GPU %u "
					 "(cudaIpc sharing) and gpu_fanout is \"peer\"", g);
				return -ENODEV;
			}
			break; /* one pool answers for all */
		}
	}
	rgaps_info("topic '%s': GPU %u -> %s: %s", t->cfg.name, g,
		   gp->role == RGAPSD_GPU_PEER ? "peer" : "replica", gp->why);
	return 0;
}

const char *rgapsd_gpu_pci(const struct rgapsd_topic *t, int32_t gpu)
{
	if (!t->topo || gpu < 0 || (uint32_t)gpu >= t->topo->ndevices || !t->topo->pci[gpu][0])
		return NULL;
	return t->topo->pci[gpu];
}

static const char *visible_env(void)
{
	const char *v = getenv("CUDA_VISIBLE_DEVICES");

	return v ? v : "unset";
}

/* Does the client see the GPU at pci? Yes when either side cannot tell. */
static bool client_sees(const struct rgapsd_client_gpus *cg, const char *pci)
{
	if (!cg->nseen || !pci)
		return true;
	for (uint32_t i = 0; i < cg->nseen; i++)
		if (strcmp(cg->seen[i], pci) == 0)
			return true;
	return false;
}

/* The client's GPU as rgapsd numbers it, from its PCI address; -ENODEV if rgapsd lacks it. */
static int client_gpu(struct rgapsd_topic *t, const struct rgapsd_client_gpus *cg, int32_t *gpu_p,
		      char *err, size_t errlen)
{
	*gpu_p = cg->gpu;
	if (!cg->pci || !cg->pci[0])
		return 0; /* no PCI address: the ordinal must mean the same GPU here */
	for (uint32_t i = 0; i < t->topo->ndevices; i++) {
		if (strcmp(t->topo->pci[i], cg->pci) != 0)
			continue;
		if ((int32_t)i != cg->gpu)
			rgaps_info("topic '%s': the client's GPU %d (PCI %s) is GPU %u here",
				   t->cfg.name, (int)cg->gpu, cg->pci, i);
		*gpu_p = (int32_t)i;
		return 0;
	}
	snprintf(err, errlen,
		 "the client's GPU %d (PCI %s) is not among the %u GPU%s rgapsd "
		 "sees: does rgapsd's CUDA_VISIBLE_DEVICES (%s) hide it?",
		 (int)cg->gpu, cg->pci, t->topo->ndevices, t->topo->ndevices == 1 ? "" : "s",
		 visible_env());
	return -ENODEV;
}

int rgapsd_topic_gpu_attach(struct rgapsd_topic *t, bool sub, const struct rgapsd_client_gpus *cg,
			     int32_t *gpu_p, int32_t *serve_p, const char **path_p,
			     bool *grant_rw_p, char *err, size_t errlen)
{
	uint32_t d = (uint32_t)t->cfg.device;
	const char *pools_pci;
	struct rgapsd_gpu *gp;
	int32_t gpu;
	bool sees_pools;
	int r;

	*gpu_p = -1;
	*serve_p = RGAPSD_SERVE_ORIGINAL;
	*path_p = "local";
	*grant_rw_p = false;
	if (!t->topo)
		return 0; /* host memory, or no device: one pool, readable by everyone */
	/* Clients may number GPUs otherwise (CUDA_VISIBLE_DEVICES): the PCI address decides. */
	r = client_gpu(t, cg, &gpu, err, errlen);
	if (r)
		return r;
	pools_pci = rgapsd_gpu_pci(t, (int32_t)d);
	sees_pools = client_sees(cg, pools_pci);
	if (gpu < 0) {
		if (sees_pools)
			return 0; /* unknown: served as on the pools' GPU */
		snprintf(
			err, errlen,
			"this client does not see GPU %u (PCI %s), where the topic's "
			"pools live (its CUDA_VISIBLE_DEVICES hides it), and names no GPU of its own "
			"to be served on: make its CUDA context current before it attaches, or "
			"set rgaps_attach_opts_t.device",
			d, pools_pci);
		return -ENODEV;
	}
	if ((uint32_t)gpu >= t->topo->ndevices) {
		snprintf(err, errlen, "GPU %d does not exist here: rgapsd sees %u GPU%s (is "
			 "CUDA_VISIBLE_DEVICES set differently?)", (int)gpu, t->topo->ndevices,
			 t->topo->ndevices == 1 ? "" : "s");
		return -ENODEV;
	}
	if (!serves(t, (uint32_t)gpu)) {
		char list[160] = "";
		size_t n = 0;

		for (uint32_t i = 0; i < t->cfg.ndevices && n + 8 < sizeof(list); i++)
			n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%u", i ? ", " : "",
					      t->cfg.devices[i]);
		snprintf(err, errlen, "the topic serves GPUs %s only (its \"devices\"); this "
			 "client is on GPU %d", list, (int)gpu);
		return -ENODEV;
	}
	*gpu_p = gpu;
	if ((uint32_t)gpu == d)
		return 0;
	if (!sub) {
		/* A publisher copies into its pool on GPU d from anywhere (the driver stages
		 * what peer access cannot); its own kernels may write loans with access. */
		uint8_t k = t->topo->link[gpu][d].kind;

		if (!sees_pools) {
			snprintf(
				err, errlen,
				"a publisher writes the topic's pools on GPU %u (PCI %s), "
				"which this client on GPU %d (PCI %s) does not see (its "
				"CUDA_VISIBLE_DEVICES hides it): make that GPU visible to it, or set "
				"the topic's \"device\" to %d",
				d, pools_pci, (int)gpu, t->topo->pci[gpu], (int)gpu);
			return -ENODEV;
		}
		*grant_rw_p = k == RGAPS_MEM_LINK_NVLINK || k == RGAPS_MEM_LINK_PCIE;
		return 0;
	}
	gp = &t->gpus[gpu];
	if (gp->role == RGAPSD_GPU_UNSET) {
		r = gpu_decide(t, (uint32_t)gpu, err, errlen);
		if (r)
			return r;
	}
	if (gp->role == RGAPSD_GPU_PEER && sees_pools) {
		*path_p = "peer";
		return 0;
	}
	if (gp->role == RGAPSD_GPU_PEER) {
		if (strcmp(t->cfg.gpu_fanout, "peer") == 0) {
			snprintf(
				err, errlen,
				"GPU %u (PCI %s), where the topic's pools live, is not "
				"visible to this client on GPU %d (PCI %s): its CUDA_VISIBLE_DEVICES "
				"hides it, and gpu_fanout is \"peer\": set gpu_fanout to \"auto\" or "
				"\"replicate\", or make that GPU visible to the client",
				d, pools_pci, (int)gpu, t->topo->pci[gpu]);
			return -ENODEV;
		}
		rgaps_info(
			"topic '%s': a subscriber on GPU %d (PCI %s) does not see GPU %u (PCI %s), "
			"where the pools live (its CUDA_VISIBLE_DEVICES hides it): it reads the "
			"replica on its own GPU",
			t->cfg.name, (int)gpu, t->topo->pci[gpu], d, pools_pci);
	}
	r = rgapsd_replica_start(t, gpu, err, errlen);
	if (r)
		return r;
	gp->idle_since = 0;
	*serve_p = gpu;
	*path_p = "replica";
	return 0;
}

static const char *role_name(enum rgapsd_gpu_role r)
{
	switch (r) {
	case RGAPSD_GPU_POOL:
		return "pool";
	case RGAPSD_GPU_PEER:
		return "peer";
	case RGAPSD_GPU_REPLICA:
		return "replica";
	default:
		return "unused";
	}
}

cJSON *rgapsd_topic_gpus_json(struct rgapsd_topic *t)
{
	cJSON *arr;

	if (!t->topo)
		return NULL;
	arr = cJSON_CreateArray();
	for (uint32_t g = 0; arr && g < t->topo->ndevices; g++) {
		const struct rgapsd_gpu *gp = &t->gpus[g];
		uint32_t nsub = 0, npub = 0;
		uint64_t copies = gp->copies, bytes = gp->bytes, lost = gp->lost;
		struct rgapsd_replica_stats st;
		cJSON *o;

		for (uint32_t j = 0; j < t->lim.max_subscribers; j++)
			nsub += t->subs[j] && t->subs[j]->conn_id && t->subs[j]->gpu == (int32_t)g;
		for (uint32_t k = 0; k < t->lim.max_publishers; k++)
			npub += t->pubs[k] && t->pubs[k]->conn_id && t->pubs[k]->gpu == (int32_t)g;
		if (gp->role == RGAPSD_GPU_UNSET && !nsub && !npub)
			continue;
		o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "device", g);
		cJSON_AddStringToObject(o, "role", role_name(gp->role));
		cJSON_AddStringToObject(o, "why", gp->why);
		cJSON_AddStringToObject(o, "link", link_name(t->topo->link[g][t->cfg.device].kind));
		cJSON_AddNumberToObject(o, "sub_count", nsub); /* not "subscribers": greppable tools */
		cJSON_AddNumberToObject(o, "pub_count", npub);
		if (rgapsd_replica_stats_get(t, (int32_t)g, &st)) {
			copies += st.copies;
			bytes += st.bytes;
			lost += st.lost;
			cJSON_AddNumberToObject(o, "replica_stream", (double)st.stream);
			cJSON_AddStringToObject(o, "copy", st.how);
			cJSON_AddNumberToObject(o, "fed_from", st.fed_from);
		}
		/* Per-GPU copies: the replica copies rgapsd made to this GPU (pool and peer: 0). */
		cJSON_AddNumberToObject(o, "copies", (double)copies);
		cJSON_AddNumberToObject(o, "bytes", (double)bytes);
		cJSON_AddNumberToObject(o, "lost", (double)lost);
		cJSON_AddItemToArray(arr, o);
	}
	return arr;
}

/* Stop the replicas of GPUs without subscribers (on the loop). */
static void topic_gpus_sweep(struct rgapsd_topic *t, uint64_t now)
{
	for (uint32_t g = 0; t->topo && g < t->topo->ndevices; g++) {
		struct rgapsd_gpu *gp = &t->gpus[g];
		bool readers = false;

		if (!rgapsd_replica_on(t, (int32_t)g))
			continue;
		for (uint32_t j = 0; j < t->lim.max_subscribers && !readers; j++)
			readers = t->subs[j] && t->subs[j]->serve == (int32_t)g;
		if (readers) {
			gp->idle_since = 0;
		} else if (!gp->idle_since) {
			gp->idle_since = now;
		} else if (now - gp->idle_since > REPLICATOR_IDLE_NS) {
			rgaps_info(
				"topic '%s': no subscriber left on GPU %u: its replica leaves the "
				"chain",
				t->cfg.name, g);
			rgapsd_replica_stop(t, (int32_t)g);
			gp->idle_since = 0;
		}
	}
	rgapsd_replicator_sweep(t);
}

static void topic_free(struct rgapsd_topic *t)
{
	rgapsd_replicator_destroy(t);
	free(t->gpus);
	free(t->topo);
	if (t->pubs && t->subs)
		rgapsd_members_destroy(t);
	free(t->pubs);
	free(t->subs);
	if (t->hdr)
		munmap(t->hdr, rgaps__topic_hdr_size());
	if (t->hdr_fd >= 0)
		close(t->hdr_fd);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

/*
 * The header: formatted through rgapsd's own mapping, then sealed at once, so that
 * nobody else can ever map it writable (clients get read-only fds of it).
 */
static int topic_hdr_create(struct rgapsd_topic *t, const char *name, char *err, size_t errlen)
{
	char label[RGAPS_SHM_NAME_MAX], why[256];
	void *hdr;
	int r;

	if (rgaps__shm_name(label, sizeof(label), t->d->instance, name, "meta"))
		snprintf(label, sizeof(label), "rgaps-meta");
	r = rgaps__shm_create(label, rgaps__topic_hdr_size(), why, sizeof(why));
	if (r < 0) {
		snprintf(err, errlen, "topic header: %s", why);
		return r;
	}
	t->hdr_fd = r;
	r = rgaps__shm_back(t->hdr_fd, rgaps__topic_hdr_size(), why, sizeof(why));
	if (r) {
		snprintf(err, errlen, "topic header: %s", why);
		return r;
	}
	r = rgaps__shm_map(t->hdr_fd, rgaps__topic_hdr_size(), &hdr);
	if (r) {
		snprintf(err, errlen, "cannot map the topic header: %s", strerror(-r));
		return r;
	}
	t->hdr = hdr;
	r = rgaps__topic_hdr_format(hdr, rgaps__topic_hdr_size(), name, &t->lim);
	if (r) {
		snprintf(err, errlen, "cannot format the topic header: %s", strerror(-r));
		return r;
	}
	r = rgaps__shm_seal(t->hdr_fd, rgaps__topic_hdr_size(), true, why, sizeof(why));
	if (r)
		snprintf(err, errlen, "topic header: %s", why);
	return r;
}

/*
 * A topic is its header segment (layout constants, the directory generation,
 * the closed flag) and its members; each attachment brings the memory it needs
 * (members.c), so an idle topic costs one page.
 */
static int topic_create(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
			size_t errlen)
{
	const struct rgaps_topic_config *tc = rgapsd_topic_configured(d, name);
	struct rgapsd_topic *t = calloc(1, sizeof(*t));
	char pool[32], msg[32];
	int r;

	if (!t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	t->d = d;
	t->hdr_fd = -1;
	pthread_mutex_init(&t->lock, NULL);
	t->adhoc = !tc;
	if (tc) {
		t->cfg = *tc;
	} else {
		t->cfg = d->cfg.topic_defaults;
		snprintf(t->cfg.name, sizeof(t->cfg.name), "%s", name);
	}
	t->mem = pick_memory(d, &t->cfg, err, errlen);
	if (!t->mem) {
		r = -ENODEV;
		goto err_free;
	}
	r = rgaps__topic_limits_from_config(&t->cfg, mem_kind_of(t->mem), t->cfg.device, &t->lim);
	if (r) {
		snprintf(err, errlen, "topic configuration out of bounds");
		goto err_free;
	}
	r = topic_gpus_init(t, err, errlen);
	if (r)
		goto err_free;
	t->pubs = calloc(t->lim.max_publishers, sizeof(*t->pubs));
	t->subs = calloc(t->lim.max_subscribers, sizeof(*t->subs));
	if (!t->pubs || !t->subs) {
		snprintf(err, errlen, "out of memory");
		r = -ENOMEM;
		goto err_free;
	}
	r = topic_hdr_create(t, name, err, errlen);
	if (r)
		goto err_free;
	t->busy_ns = rgaps_now_ns(CLOCK_MONOTONIC);
	t->next = d->topics;
	d->topics = t;
	d->ntopics++;
	rgaps__format_size(t->cfg.pool_size, pool, sizeof(pool));
	rgaps__format_size(t->cfg.max_message_size, msg, sizeof(msg));
	rgaps_info("topic '%s' created: memory %s, pool %s per publisher, max_message_size %s, "
		   "queue %u, %s%s",
		   name, t->mem->name, pool, msg, t->cfg.queue_depth,
		   t->cfg.overflow == RGAPS_OVERFLOW_BLOCK ? "overflow block" : "overflow drop_oldest",
		   tc ? "" : " (defaults)");
	*t_p = t;
	return 0;

err_free:
	topic_free(t);
	return r;
}

/* Before a topic is created, by anyone: create_topics and max_topics. 0, -ENOENT, -ENFILE. */
static int topic_may_create(struct rgapsd *d, const char *name, char *err, size_t errlen)
{
	uint32_t adhoc = 0;

	if (rgapsd_topic_configured(d, name))
		return 0;
	if (d->cfg.create_topics == RGAPSD_CREATE_CONFIGURED) {
		d->refused.topics_refused_unconfigured++;
		snprintf(err, errlen, "no topic '%s' is configured, and create_topics is "
			 "\"configured\"", name);
		return -ENOENT;
	}
	for (const struct rgapsd_topic *t = d->topics; t; t = t->next)
		adhoc += t->adhoc;
	if (adhoc >= d->cfg.max_topics) {
		d->refused.topics_refused_max++;
		snprintf(err, errlen, "rgapsd holds max_topics (%u) topics made from the defaults",
			 d->cfg.max_topics);
		return -ENFILE;
	}
	return 0;
}

int rgapsd_topic_get(struct rgapsd *d, const char *name, struct rgapsd_topic **t_p, char *err,
		      size_t errlen)
{
	int r;

	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		if (strcmp(t->cfg.name, name) == 0) {
			*t_p = t;
			return 0;
		}
	}
	r = topic_may_create(d, name, err, errlen);
	if (r)
		return r;
	return topic_create(d, name, t_p, err, errlen);
}

void rgapsd_topics_destroy(struct rgapsd *d)
{
	while (d->topics) {
		struct rgapsd_topic *t = d->topics;

		d->topics = t->next;
		rgaps__topic_close(t->hdr);
		rgapsd_members_wake(t);
		topic_free(t);
	}
	d->ntopics = 0;
	rgapsd_worker_stop(&d->reaper); /* the members' memory goes before their plugins */
	for (uint32_t i = 0; i < d->nmem_plugins; i++) {
		d->mem_plugins[i]->ops.memory.fini(d->mem_plugins[i]->ctx);
		rgaps__plugin_unload(d->mem_plugins[i]);
	}
	d->nmem_plugins = 0;
}

/* In use: anything that holds the topic or what it made, or history kept for late joiners. */
static bool topic_in_use(struct rgapsd *d, struct rgapsd_topic *t)
{
	if (t->attachments || t->npubs || t->nsubs || t->ndraining || t->ngone)
		return true;
	if (t->replicator)
		return true;
	return d->hooks && d->hooks->topic_held && d->hooks->topic_held(d->hooks_ctx, t);
}

#define IDLE_CHECK_NS (1000ull * 1000 * 1000) /* look for idle topics once a second */

/*
 * Remove the topics made from the defaults that have been unused for topic_idle_s:
 * no member (attached, draining or kept for history), no attachment, no replicator,
 * nothing the layers above hold (the topic_held hook).
 */
static void topics_sweep_idle(struct rgapsd *d, uint64_t now)
{
	uint64_t idle_ns = (uint64_t)d->cfg.topic_idle_s * 1000000000ull;
	struct rgapsd_topic **pp = &d->topics;

	if (!d->cfg.topic_idle_s || d->stopping || now - d->idle_checked_ns < IDLE_CHECK_NS)
		return;
	d->idle_checked_ns = now;
	while (*pp) {
		struct rgapsd_topic *t = *pp;

		/* Topics of topics_dir stay: the administrator's, bounded by the configuration,
		 * and their counters are what monitoring watches. */
		if (!t->adhoc || topic_in_use(d, t)) {
			t->busy_ns = now;
			pp = &t->next;
			continue;
		}
		if (now - t->busy_ns < idle_ns) {
			pp = &t->next;
			continue;
		}
		*pp = t->next;
		d->ntopics--;
		d->topics_removed_idle++;
		rgaps_info("topic '%s' removed: unused for %u s (topic_idle_s); the next attach "
			   "makes it again", t->cfg.name, d->cfg.topic_idle_s);
		/* Whoever still maps the header (a client that detached) learns it is over. */
		rgaps__topic_close(t->hdr);
		rgapsd_members_wake(t);
		topic_free(t);
	}
}

/* ---------------------------------------------------------------- the sweep */

#define SWEEP_MS 100

/* Every topic's GPUs and members, then the idle topics: each sweep calls down. */
static void on_sweep(uv_timer_t *timer)
{
	struct rgapsd *d = timer->data;
	uint64_t now = rgaps_now_ns(CLOCK_MONOTONIC);

	for (struct rgapsd_topic *t = d->topics; t; t = t->next) {
		topic_gpus_sweep(t, now);
		rgapsd_members_sweep(t, now);
	}
	topics_sweep_idle(d, now);
}

void rgapsd_topics_hook(struct rgapsd *d, const struct rgapsd_topic_hooks *hooks, void *ctx)
{
	d->hooks = hooks;
	d->hooks_ctx = ctx;
}

void rgapsd_topics_start(struct rgapsd *d)
{
	uv_timer_init(d->loop, &d->sweep);
	d->sweep.data = d;
	uv_timer_start(&d->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
	d->sweep_started = true;
}

void rgapsd_topics_stop(struct rgapsd *d)
{
	if (!d->sweep_started)
		return;
	uv_timer_stop(&d->sweep);
	uv_close((uv_handle_t *)&d->sweep, NULL);
	d->sweep_started = false;
}
