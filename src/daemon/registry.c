/*
 * The plugin registry of rgapsd (registry.h).
 */
#include "registry.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_file.h"
#include "../common/log.h"

static void on_skipped(void *arg, const char *why)
{
	rgaps_warn("plugin left out: %s", why);
}

int rgapsd_registry_scan(struct rgapsd_registry *reg, const char *dir, char *err, size_t errlen)
{
	static const uint32_t kinds[] = { RGAPS_PLUGIN_MEMORY, RGAPS_PLUGIN_TRANSPORT,
					  RGAPS_PLUGIN_STAGE };

	memset(reg, 0, sizeof(*reg));
	snprintf(reg->dir, sizeof(reg->dir), "%s", dir);
	for (size_t k = 0; k < RGAPS_ARRAY_SIZE(kinds); k++) {
		uint32_t kind = kinds[k];
		char names[256];

		if (rgaps__plugin_discover(dir, kind, &reg->of[kind], &reg->n[kind], on_skipped,
					   NULL) != 0) {
			rgapsd_registry_free(reg);
			snprintf(err, errlen, "out of memory while discovering plugins");
			return -ENOMEM;
		}
		rgapsd_registry_names(reg, kind, names, sizeof(names));
		rgaps_debug("%s plugins in %s: %s", rgaps__plugin_kind_name(kind), dir, names);
	}
	for (uint32_t i = 0; i < reg->n[RGAPS_PLUGIN_TRANSPORT]; i++) {
		const struct rgaps_plugin_info *a = &reg->of[RGAPS_PLUGIN_TRANSPORT][i];

		for (uint32_t j = 0; j < i; j++) {
			const struct rgaps_plugin_info *b = &reg->of[RGAPS_PLUGIN_TRANSPORT][j];

			if (a->data_port_offset == b->data_port_offset) {
				snprintf(
					err, errlen,
					"transport plugins '%s' and '%s' in %s both declare data-port "
					"offset %u: remove one",
					b->name, a->name, dir, a->data_port_offset);
				rgapsd_registry_free(reg);
				return -EINVAL;
			}
		}
	}
	return 0;
}

void rgapsd_registry_free(struct rgapsd_registry *reg)
{
	for (int k = 0; k < RGAPSD_KINDS; k++) {
		free(reg->of[k]);
		reg->of[k] = NULL;
		reg->n[k] = 0;
	}
}

const struct rgaps_plugin_info *rgapsd_registry_find(const struct rgapsd_registry *reg,
						     uint32_t kind, const char *name)
{
	for (uint32_t i = 0; kind < RGAPSD_KINDS && i < reg->n[kind]; i++)
		if (strcmp(reg->of[kind][i].name, name) == 0)
			return &reg->of[kind][i];
	return NULL;
}

void rgapsd_registry_names(const struct rgapsd_registry *reg, uint32_t kind, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; kind < RGAPSD_KINDS && i < reg->n[kind] && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "",
					reg->of[kind][i].name);
	if (!buf[0])
		snprintf(buf, len, "none");
}

/* name must be "auto" (when allowed) or a plugin of kind. */
static int check_name(const struct rgapsd_registry *reg, uint32_t kind, const char *name,
		      bool auto_ok, const char *where, const char *key, char *err, size_t errlen)
{
	char names[256];

	if ((auto_ok && strcmp(name, "auto") == 0) || rgapsd_registry_find(reg, kind, name))
		return 0;
	rgapsd_registry_names(reg, kind, names, sizeof(names));
	snprintf(err, errlen, "%skey '%s': no %s plugin '%s' in %s (found: %s)", where, key,
		 rgaps__plugin_kind_name(kind), name, reg->dir, names);
	return -EINVAL;
}

static int check_topic(const struct rgapsd_registry *reg, const struct rgaps_topic_config *tc,
		       const char *where, char *err, size_t errlen)
{
	int e = check_name(reg, RGAPS_PLUGIN_MEMORY, tc->memory, true, where, "memory", err,
			   errlen);

	if (!e)
		e = check_name(reg, RGAPS_PLUGIN_TRANSPORT, tc->transport, true, where, "transport",
			       err, errlen);
	for (uint32_t i = 0; !e && i < tc->nstages; i++)
		e = check_name(reg, RGAPS_PLUGIN_STAGE, tc->stages[i], false, where, "stages", err,
			       errlen);
	return e;
}

int rgapsd_registry_check(const struct rgapsd_registry *reg, const struct rgapsd_config *cfg,
			  char *err, size_t errlen)
{
	char where[RGAPS_TOPIC_NAME_MAX + 32];
	int e = check_topic(reg, &cfg->topic_defaults, "defaults: ", err, errlen);

	for (uint32_t i = 0; !e && i < cfg->ntopics; i++) {
		snprintf(where, sizeof(where), "topic '%s': ", cfg->topics[i].name);
		e = check_topic(reg, &cfg->topics[i], where, err, errlen);
	}
	if (!e) {
		cJSON *all = cJSON_Parse(cfg->transport_options), *it;

		cJSON_ArrayForEach(it, all)
		{
			char key[64];

			snprintf(key, sizeof(key), "transport_options.%.40s", it->string);
			e = check_name(reg, RGAPS_PLUGIN_TRANSPORT, it->string, false, "", key, err,
				       errlen);
			if (e)
				break;
		}
		cJSON_Delete(all);
	}
	return e;
}
