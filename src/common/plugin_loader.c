/*
 * Plugin loading and ABI checks (see plugin_loader.h).
 */
#include "plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "rgaps_build_config.h"
#include "shm.h"

const char *rgaps__plugin_kind_name(uint32_t kind)
{
	switch (kind) {
	case RGAPS_PLUGIN_MEMORY:
		return "memory";
	case RGAPS_PLUGIN_TRANSPORT:
		return "transport";
	case RGAPS_PLUGIN_STAGE:
		return "stage";
	}
	return "unknown";
}

/* The object holding this code (rgapsd, or librgaps.so in a client) lies in the build root. */
static bool running_from_build_tree(void)
{
	char root[PATH_MAX], real[PATH_MAX];
	const char *self;
	Dl_info info;
	size_t n;

	if (!realpath(RGAPS_BUILD_ROOT, root))
		return false; /* no build tree here (an installed binary, as it should be) */
	/* dladdr names a shared library by its path; the main program maybe by "". */
	self = dladdr((void *)running_from_build_tree, &info) && info.dli_fname &&
			       info.dli_fname[0] == '/'
		       ? info.dli_fname
		       : "/proc/self/exe";
	if (!realpath(self, real))
		return false;
	n = strlen(root);
	return strncmp(real, root, n) == 0 && real[n] == '/';
}

const char *rgaps__plugin_default_dir(void)
{
	const char *env = getenv("RGAPS_PLUGIN_DIR");

	if (env && *env)
		return env;
	/*
	 * A program running from the build tree (tests, quick start) finds fresh
	 * plugins there. Only then: an installed binary must never look in the
	 * directory it was built in, which any user could create on this host
	 * (/tmp/...) with a module that would run inside rgapsd or its clients.
	 */
	if (running_from_build_tree())
		return RGAPS_BUILD_PLUGIN_DIR;
	return RGAPS_INSTALL_PLUGIN_DIR;
}

/* ---------------------------------------------------------------- -ENOTSUP stubs */

static int mem_stub_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	*ctx_p = NULL;
	return 0;
}

static void mem_stub_fini(void *ctx)
{
}

static int mem_stub_probe(void *ctx, int32_t device, char *why, size_t whylen)
{
	snprintf(why, whylen, "plugin has no probe operation");
	return -ENOTSUP;
}

static int mem_stub_pool_create(void *ctx, const char *name, uint64_t size, int32_t device,
				struct rgaps_mem_region *region_p)
{
	return -ENOTSUP;
}

static int mem_stub_pool_import(void *ctx, int fd, uint64_t size, int32_t device, uint32_t flags,
				struct rgaps_mem_region *region_p)
{
	return -ENOTSUP;
}

static void mem_stub_pool_release(void *ctx, struct rgaps_mem_region *region)
{
}

static int mem_stub_copy(void *ctx, void *dst, const void *src, size_t n, uint32_t dir)
{
	return -ENOTSUP;
}

static int mem_stub_host_register(void *ctx, void *ptr, size_t n)
{
	return -ENOTSUP;
}

static int mem_stub_host_unregister(void *ctx, void *ptr)
{
	return -ENOTSUP;
}

static int mem_stub_copy_async(void *ctx, void *dst, const void *src, size_t n, uint32_t dir,
			       void (*done)(void *arg, int status), void *arg)
{
	return -ENOTSUP;
}

static int mem_stub_numa_node(void *ctx, int32_t device)
{
	return -1;
}

static int mem_stub_topology(void *ctx, struct rgaps_mem_topology *topo)
{
	topo->ndevices = 0; /* a plugin from before several devices: it has none to tell of */
	return -ENOTSUP;
}

static int mem_stub_pool_grant(void *ctx, struct rgaps_mem_region *region, int32_t device,
			       uint32_t flags)
{
	return -ENOTSUP;
}

static int mem_stub_copy_stream(void *ctx, void *dst, const void *src, size_t n, void *stream)
{
	return -ENOTSUP;
}

static int mem_stub_stream_sync(void *ctx, void *stream)
{
	return -ENOTSUP;
}

static int mem_stub_fence_create(void *ctx, int32_t device, uint32_t flags, void **fence_p,
				 uint8_t handle[RGAPS_FENCE_HANDLE_LEN], uint64_t *state)
{
	return -ENOTSUP;
}

static int mem_stub_fence_open(void *ctx, const uint8_t handle[RGAPS_FENCE_HANDLE_LEN],
			       const uint64_t *state, void **fence_p)
{
	return -ENOTSUP;
}

static void mem_stub_fence_destroy(void *ctx, void *fence)
{
}

static int mem_stub_fence_record(void *ctx, void *fence, void *stream)
{
	return -ENOTSUP;
}

static int mem_stub_fence_query(void *ctx, void *fence)
{
	return -ENOTSUP;
}

static int mem_stub_fence_wait(void *ctx, void *fence, void *stream)
{
	return -ENOTSUP;
}

static int mem_stub_mem_info(void *ctx, int32_t device, uint64_t *free_p, uint64_t *total_p)
{
	return -ENOTSUP;
}

static int mem_stub_copy_relay(void *ctx, const void *src, size_t n,
			       const struct rgaps_relay_hop *hops, uint32_t nhops, size_t piece,
			       void (*whole)(void *arg, uint32_t hop), void *arg)
{
	return -ENOTSUP;
}

static int mem_stub_copy_during(void *ctx, void *dst, const void *src, size_t n, uint32_t dir,
				bool (*during)(void *arg), void *arg)
{
	return -ENOTSUP;
}

static const struct rgaps_memory_ops mem_stubs = {
	.init = mem_stub_init,
	.fini = mem_stub_fini,
	.probe = mem_stub_probe,
	.pool_create = mem_stub_pool_create,
	.pool_import = mem_stub_pool_import,
	.pool_release = mem_stub_pool_release,
	.copy = mem_stub_copy,
	.host_register = mem_stub_host_register,
	.host_unregister = mem_stub_host_unregister,
	.copy_async = mem_stub_copy_async,
	.numa_node = mem_stub_numa_node,
	.topology = mem_stub_topology,
	.pool_grant = mem_stub_pool_grant,
	.copy_stream = mem_stub_copy_stream,
	.stream_sync = mem_stub_stream_sync,
	.fence_create = mem_stub_fence_create,
	.fence_open = mem_stub_fence_open,
	.fence_destroy = mem_stub_fence_destroy,
	.fence_record = mem_stub_fence_record,
	.fence_query = mem_stub_fence_query,
	.fence_wait = mem_stub_fence_wait,
	.mem_info = mem_stub_mem_info,
	.copy_relay = mem_stub_copy_relay,
	.copy_during = mem_stub_copy_during,
};

static int tr_stub_init(const struct rgaps_plugin_env *env, const struct rgaps_transport_cbs *cbs,
			void **ctx_p)
{
	*ctx_p = NULL;
	return 0;
}

static void tr_stub_fini(void *ctx)
{
}

static int tr_stub_probe(void *ctx, char *why, size_t whylen)
{
	snprintf(why, whylen, "plugin has no probe operation");
	return -ENOTSUP;
}

static int tr_stub_listen(void *ctx, const char *host, uint16_t port)
{
	return -ENOTSUP;
}

static int tr_stub_connect(void *ctx, const char *host, uint16_t port,
			   const uint8_t token[RGAPS_LINK_TOKEN_LEN], struct rgaps_link **link_p)
{
	return -ENOTSUP;
}

static void tr_stub_close(void *ctx, struct rgaps_link *link)
{
}

static int tr_stub_reg_local(void *ctx, void *addr, uint64_t len, void **mr_p)
{
	return -ENOTSUP;
}

static void tr_stub_dereg_local(void *ctx, void *mr)
{
}

static int tr_stub_sender_ring_prepare(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				       uint8_t *desc, size_t *desc_len_p)
{
	return -ENOTSUP;
}

static int tr_stub_receiver_ring_attach(void *ctx, struct rgaps_link *link, uint32_t ring_id,
					void *ring, uint64_t size, const uint8_t *peer_desc,
					size_t peer_desc_len, uint8_t *desc, size_t *desc_len_p)
{
	return -ENOTSUP;
}

static int tr_stub_sender_ring_connect(void *ctx, struct rgaps_link *link, uint32_t ring_id,
				       const uint8_t *desc, size_t desc_len)
{
	return -ENOTSUP;
}

static void tr_stub_ring_detach(void *ctx, struct rgaps_link *link, uint32_t ring_id)
{
}

static int tr_stub_post_record(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t off,
			       const struct rgaps_sg *sg, uint32_t nsg, uint64_t cookie)
{
	return -ENOTSUP;
}

static int tr_stub_post_head(void *ctx, struct rgaps_link *link, uint32_t ring_id, uint64_t head)
{
	return -ENOTSUP;
}

static void tr_stub_flush(void *ctx, struct rgaps_link *link)
{
}

static void tr_stub_link_stats(void *ctx, struct rgaps_link *link, struct rgaps_link_stats *st)
{
	memset(st, 0, sizeof(*st));
}

static const struct rgaps_transport_ops tr_stubs = {
	.init = tr_stub_init,
	.fini = tr_stub_fini,
	.probe = tr_stub_probe,
	.listen = tr_stub_listen,
	.connect = tr_stub_connect,
	.close = tr_stub_close,
	.reg_local = tr_stub_reg_local,
	.dereg_local = tr_stub_dereg_local,
	.sender_ring_prepare = tr_stub_sender_ring_prepare,
	.receiver_ring_attach = tr_stub_receiver_ring_attach,
	.sender_ring_connect = tr_stub_sender_ring_connect,
	.ring_detach = tr_stub_ring_detach,
	.post_record = tr_stub_post_record,
	.post_head = tr_stub_post_head,
	.flush = tr_stub_flush,
	.link_stats = tr_stub_link_stats,
};

static int st_stub_init(const struct rgaps_plugin_env *env, void **ctx_p)
{
	*ctx_p = NULL;
	return 0;
}

static void st_stub_fini(void *ctx)
{
}

static int st_stub_describe(void *ctx, struct rgaps_stage_desc *desc_p)
{
	return -ENOTSUP;
}

static int st_stub_topic_open(void *ctx, const char *topic, void *topic_state)
{
	return 0;
}

static void st_stub_topic_close(void *ctx, void *topic_state)
{
}

static int st_stub_process(void *ctx, struct rgaps_stage_work *work)
{
	snprintf(work->why, work->whylen, "stage has no process operation");
	return RGAPS_STAGE_FAIL;
}

static const struct rgaps_stage_ops st_stubs = {
	.init = st_stub_init,
	.fini = st_stub_fini,
	.describe = st_stub_describe,
	.topic_open = st_stub_topic_open,
	.topic_close = st_stub_topic_close,
	.process = st_stub_process,
};

/* Copy the plugin's table over the stubs, slot by slot, for the part it has. */
static void fill_ops(void *dst, const void *stubs, size_t full, const void *src, size_t src_size)
{
	void (*const *s)(void) = src;
	void (**d)(void) = dst;
	size_t n = RGAPS_MIN(full, src_size) / sizeof(void (*)(void));

	memcpy(dst, stubs, full);
	for (size_t i = 0; i < n; i++)
		if (s[i])
			d[i] = s[i];
}

/* Plugin names: 1..31 of a-z 0-9 _ - (they name files and travel between daemons). */
static bool name_valid(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (i >= 31 || !((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
				 s[i] == '_' || s[i] == '-'))
			return false;
	return i > 0;
}

int rgaps__plugin_load(const char *dir, uint32_t kind, const char *name,
		       struct rgaps_loaded_plugin **lp_p, char *err, size_t errlen)
{
	struct rgaps_loaded_plugin *lp;
	const struct rgaps_plugin *d;
	int r;

	if (!name_valid(name)) {
		snprintf(err, errlen, "'%.40s' is not a plugin name (1 to 31 of a-z 0-9 _ -)", name);
		return -EINVAL;
	}
	lp = calloc(1, sizeof(*lp));
	if (!lp)
		return -ENOMEM;
	snprintf(lp->name, sizeof(lp->name), "%s", name);
	lp->kind = kind;
	r = snprintf(lp->path, sizeof(lp->path), "%s/%s-%s.so", dir, rgaps__plugin_kind_name(kind),
		     name);
	if (r < 0 || (size_t)r >= sizeof(lp->path)) {
		snprintf(err, errlen, "plugin path too long in %s", dir);
		r = -ENAMETOOLONG;
		goto err_free;
	}
	if (access(lp->path, R_OK) != 0) {
		r = -errno;
		snprintf(err, errlen, "%s plugin '%s': %s: %s", rgaps__plugin_kind_name(kind), name,
			 lp->path, strerror(errno));
		goto err_free;
	}
	lp->dl = dlopen(lp->path, RTLD_NOW | RTLD_LOCAL);
	if (!lp->dl) {
		snprintf(err, errlen, "%s plugin '%s': dlopen failed: %s",
			 rgaps__plugin_kind_name(kind), name, dlerror());
		r = -ENOEXEC;
		goto err_free;
	}
	d = dlsym(lp->dl, RGAPS_PLUGIN_SYMBOL);
	if (!d) {
		snprintf(err, errlen, "%s: not an rgaps plugin (no '%s' symbol)", lp->path,
			 RGAPS_PLUGIN_SYMBOL);
		r = -ENOEXEC;
		goto err_close;
	}
	if (d->abi_version != RGAPS_PLUGIN_ABI_VERSION) {
		snprintf(err, errlen, "%s: plugin ABI version %u, this rgaps needs %u: rebuild it",
			 lp->path, d->abi_version, RGAPS_PLUGIN_ABI_VERSION);
		r = -ENOEXEC;
		goto err_close;
	}
	if (d->struct_size < offsetof(struct rgaps_plugin, data_port_offset) +
				 sizeof(d->data_port_offset) ||
	    d->kind != kind || !d->ops || !d->name || strcmp(d->name, name) != 0) {
		snprintf(err, errlen, "%s: plugin descriptor does not describe %s plugin '%s'",
			 lp->path, rgaps__plugin_kind_name(kind), name);
		r = -ENOEXEC;
		goto err_close;
	}
	if (kind == RGAPS_PLUGIN_TRANSPORT ?
		    d->data_port_offset < 1 || d->data_port_offset > RGAPS_PLUGIN_PORT_OFFSET_MAX :
		    d->data_port_offset != 0) {
		snprintf(err, errlen, "%s: data-port offset %u %s", lp->path, d->data_port_offset,
			 kind == RGAPS_PLUGIN_TRANSPORT ? "is not in 1..99" :
							  "declared by a plugin that is no transport");
		r = -ENOEXEC;
		goto err_close;
	}
	switch (kind) {
	case RGAPS_PLUGIN_MEMORY:
		fill_ops(&lp->ops.memory, &mem_stubs, sizeof(mem_stubs), d->ops, d->ops_size);
		break;
	case RGAPS_PLUGIN_TRANSPORT:
		fill_ops(&lp->ops.transport, &tr_stubs, sizeof(tr_stubs), d->ops, d->ops_size);
		break;
	case RGAPS_PLUGIN_STAGE:
		fill_ops(&lp->ops.stage, &st_stubs, sizeof(st_stubs), d->ops, d->ops_size);
		break;
	default:
		snprintf(err, errlen, "%s: %s plugins are not loadable by this build", lp->path,
			 rgaps__plugin_kind_name(kind));
		r = -ENOEXEC;
		goto err_close;
	}
	lp->desc = d;
	*lp_p = lp;
	return 0;

err_close:
	dlclose(lp->dl);
err_free:
	free(lp);
	return r;
}

static int info_cmp(const void *a, const void *b)
{
	const struct rgaps_plugin_info *x = a, *y = b;

	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	return strcmp(x->name, y->name);
}

int rgaps__plugin_discover(const char *dir, uint32_t kind, struct rgaps_plugin_info **list_p,
			   uint32_t *n_p, void (*skipped)(void *arg, const char *why), void *arg)
{
	const char *kname = rgaps__plugin_kind_name(kind);
	struct rgaps_plugin_info *list = NULL;
	size_t klen = strlen(kname);
	uint32_t n = 0, cap = 0;
	struct dirent *de;
	DIR *dh = opendir(dir);

	*list_p = NULL;
	*n_p = 0;
	if (!dh)
		return 0;
	while ((de = readdir(dh))) {
		size_t len = strlen(de->d_name);
		struct rgaps_loaded_plugin *lp;
		char name[64], why[640];

		if (len <= klen + 4 || strncmp(de->d_name, kname, klen) != 0 ||
		    de->d_name[klen] != '-' || strcmp(de->d_name + len - 3, ".so") != 0 ||
		    len - klen - 4 >= sizeof(name))
			continue;
		memcpy(name, de->d_name + klen + 1, len - klen - 4);
		name[len - klen - 4] = '\0';
		if (rgaps__plugin_load(dir, kind, name, &lp, why, sizeof(why)) != 0) {
			if (skipped)
				skipped(arg, why);
			continue;
		}
		if (n == cap) {
			struct rgaps_plugin_info *nl = realloc(list, (cap + 8) * sizeof(*nl));

			if (!nl) {
				rgaps__plugin_unload(lp);
				closedir(dh);
				free(list);
				return -ENOMEM;
			}
			list = nl;
			cap += 8;
		}
		memset(&list[n], 0, sizeof(list[n]));
		snprintf(list[n].name, sizeof(list[n].name), "%s", lp->desc->name);
		snprintf(list[n].path, sizeof(list[n].path), "%s", lp->path);
		snprintf(list[n].description, sizeof(list[n].description), "%s",
			 lp->desc->description ? lp->desc->description : "");
		list[n].kind = kind;
		list[n].priority = lp->desc->priority;
		list[n].data_port_offset = lp->desc->data_port_offset;
		n++;
		rgaps__plugin_unload(lp);
	}
	closedir(dh);
	if (n)
		qsort(list, n, sizeof(*list), info_cmp);
	*list_p = list;
	*n_p = n;
	return 0;
}

void rgaps__plugin_unload(struct rgaps_loaded_plugin *lp)
{
	if (!lp)
		return;
	if (lp->dl)
		dlclose(lp->dl);
	free(lp);
}

static void plugin_log(int level, const char *fmt, ...)
{
	char buf[768];
	va_list ap;

	if (level > rgaps__log_level)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	rgaps__log(level, "plugin", 0, "%s", buf);
}

void rgaps__plugin_env_init(struct rgaps_plugin_env *env, uint32_t role, void *uv_loop)
{
	memset(env, 0, sizeof(*env));
	env->struct_size = sizeof(*env);
	env->role = role;
	env->log = plugin_log;
	env->uv_loop = uv_loop;
	env->shm_create = rgaps__shm_create;
	env->shm_check = rgaps__shm_check;
}

const struct rgaps_plugin_option *rgaps__plugin_options(const struct rgaps_loaded_plugin *lp,
							uint32_t *n)
{
	const struct rgaps_plugin *d = lp->desc;

	*n = 0;
	if (d->struct_size < offsetof(struct rgaps_plugin, noptions) + sizeof(d->noptions) ||
	    !d->options)
		return NULL;
	*n = d->noptions;
	return d->options;
}

int rgaps__plugin_options_check(const struct rgaps_loaded_plugin *lp, const void *opts,
				const char *prefix, struct rgaps_option_value *vals, uint32_t max,
				uint32_t *nvals, char *err, size_t errlen)
{
	const cJSON *obj = opts, *it;
	const struct rgaps_plugin_option *decl;
	uint32_t ndecl, i;

	*nvals = 0;
	decl = rgaps__plugin_options(lp, &ndecl);
	cJSON_ArrayForEach(it, obj)
	{
		double v = it->valuedouble;

		for (i = 0; i < ndecl && strcmp(decl[i].name, it->string) != 0; i++)
			;
		if (i == ndecl) {
			size_t off = 0;

			off += (size_t)snprintf(err, errlen,
						"key '%s%s': the %s plugin has no such option",
						prefix, it->string, lp->name);
			for (uint32_t k = 0; k < ndecl && off < errlen; k++)
				off += (size_t)snprintf(err + off, errlen - off, "%s%s",
							k ? ", " : " (known: ", decl[k].name);
			if (ndecl && off < errlen)
				snprintf(err + off, errlen - off, ")");
			return -EINVAL;
		}
		if (!cJSON_IsNumber(it) || !(v >= 0 && v < 18446744073709551616.0) ||
		    v != (double)(uint64_t)v) {
			snprintf(err, errlen, "key '%s%s': expected a non-negative integer", prefix,
				 it->string);
			return -EINVAL;
		}
		if ((uint64_t)v < decl[i].min || (uint64_t)v > decl[i].max) {
			snprintf(err, errlen, "key '%s%s': %llu is out of range [%llu, %llu]", prefix,
				 it->string, (unsigned long long)v, (unsigned long long)decl[i].min,
				 (unsigned long long)decl[i].max);
			return -EINVAL;
		}
		if (*nvals == max) {
			snprintf(err, errlen, "key '%s': too many options", prefix);
			return -EINVAL;
		}
		vals[(*nvals)++] = (struct rgaps_option_value){ decl[i].name, (uint64_t)v };
	}
	return 0;
}
