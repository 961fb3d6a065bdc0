/*
 * Loads plugins (include/rgaps/plugin.h) from a directory with dlopen, checks
 * their ABI, and gives the caller a full operations table: operations a plugin
 * leaves NULL, or that its older, shorter table lacks, become stubs returning
 * -ENOTSUP, so callers never test for NULL (Knot's lib/module.c, rdma-core's
 * dummy_ops.c).
 */
#ifndef RGAPS_COMMON_PLUGIN_LOADER_H
#define RGAPS_COMMON_PLUGIN_LOADER_H

#include <stddef.h>

#include "rgaps/plugin.h"

struct rgaps_loaded_plugin {
	void *dl;
	const struct rgaps_plugin *desc;
	uint32_t kind;
	char name[32];
	char path[512];
	union {
		struct rgaps_memory_ops memory;
		struct rgaps_transport_ops transport;
		struct rgaps_stage_ops stage;
	} ops;
	void *ctx; /* from ops.init, if the caller ran it */
};

/* Default plugin directory: $RGAPS_PLUGIN_DIR, the build tree, else the installed one. */
const char *rgaps__plugin_default_dir(void);

/*
 * Load "<dir>/<kind>-<name>.so". On failure returns -ENOENT (no file),
 * -ENOEXEC (not a plugin / ABI mismatch / wrong kind) or -ENOMEM, with the
 * reason in err.
 */
int rgaps__plugin_load(const char *dir, uint32_t kind, const char *name,
		       struct rgaps_loaded_plugin **lp_p, char *err, size_t errlen);
void rgaps__plugin_unload(struct rgaps_loaded_plugin *lp);

/* What discovery found of one plugin (the fields of its descriptor). */
struct rgaps_plugin_info {
	char name[32];
	uint32_t kind;
	uint32_t priority;	   /* "auto" prefers the highest; 0: never by "auto" */
	uint32_t data_port_offset; /* transports */
	char path[512];
	char description[96];
};

/*
 * Every plugin of kind in dir: each "<kind>-<name>.so" is opened and its
 * descriptor checked as rgaps__plugin_load() checks it, then closed again.
 * *list_p (malloc'd, free() it) is sorted by priority, highest first, then by
 * name. A file that fails the checks is left out and skipped(arg, why) is
 * called with the reason (skipped may be NULL). A directory that does not
 * exist holds no plugins. 0, or -ENOMEM.
 */
int rgaps__plugin_discover(const char *dir, uint32_t kind, struct rgaps_plugin_info **list_p,
			   uint32_t *n_p, void (*skipped)(void *arg, const char *why), void *arg);

/* The env handed to plugins (logging through rgaps' logger). */
void rgaps__plugin_env_init(struct rgaps_plugin_env *env, uint32_t role, void *uv_loop);

const char *rgaps__plugin_kind_name(uint32_t kind);

/* The options the plugin declares (NULL and *n = 0 for none, or a plugin built before them). */
const struct rgaps_plugin_option *rgaps__plugin_options(const struct rgaps_loaded_plugin *lp,
							uint32_t *n);

/*
 * Check the configured options of a loaded plugin: opts is NULL (none set) or a
 * cJSON object of name -> non-negative integer. Fills vals (capacity max, names
 * pointing into the plugin's table) and *nvals. -EINVAL with err saying
 * "key '<prefix><name>': <reason>": unknown name (listing the known ones), not
 * an integer, out of [min, max].
 */
int rgaps__plugin_options_check(const struct rgaps_loaded_plugin *lp, const void *opts,
				const char *prefix, struct rgaps_option_value *vals, uint32_t max,
				uint32_t *nvals, char *err, size_t errlen);

#endif
