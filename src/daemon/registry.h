/*
 * The plugins rgapsd found (docs/ARCHITECTURE.md section 6): every memory, transport and
 * stage plugin in the plugin directory, discovered by kind with the fields
 * each declares (name, priority for "auto", a transport's data-port offset).
 * The configuration names plugins; it is checked against what was found, at
 * start and by `rgapsd --check-config`, so that a name nobody answers is
 * refused with the file, the key and what exists. The core knows no plugin
 * by name.
 *
 * Lifecycle: scan -> find / check (any number of times) -> free.
 */
#ifndef RGAPSD_REGISTRY_H
#define RGAPSD_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "../common/plugin_loader.h"

struct rgapsd_config;

#define RGAPSD_KINDS 4 /* indexed by enum rgaps_plugin_kind (1..3) */

struct rgapsd_registry {
	char dir[512];
	struct rgaps_plugin_info *of[RGAPSD_KINDS]; /* by priority, highest first */
	uint32_t n[RGAPSD_KINDS];
};

/*
 * Discover every plugin in dir (files that are no loadable plugin are logged
 * as warnings and left out). 0; -ENOMEM; -EINVAL when two transports declare
 * the same data-port offset (err says which).
 */
int rgapsd_registry_scan(struct rgapsd_registry *reg, const char *dir, char *err, size_t errlen);
void rgapsd_registry_free(struct rgapsd_registry *reg);

/* The plugin of kind named name, or NULL. */
const struct rgaps_plugin_info *rgapsd_registry_find(const struct rgapsd_registry *reg,
						     uint32_t kind, const char *name);

/*
 * Every plugin name in cfg (each topic's memory, transport and stages, the
 * keys of transport_options) names a plugin of that kind that was found, or is
 * "auto" where that is allowed. 0, or -EINVAL with "topic 'T': key 'memory':
 * no memory plugin 'x' in DIR (found: a, b)".
 */
int rgapsd_registry_check(const struct rgapsd_registry *reg, const struct rgapsd_config *cfg,
			  char *err, size_t errlen);

/* "a, b, c" (or "none"): the names of kind, for messages. */
void rgapsd_registry_names(const struct rgapsd_registry *reg, uint32_t kind, char *buf, size_t len);

#endif
