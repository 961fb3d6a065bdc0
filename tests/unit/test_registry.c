/*
 * The plugin registry of rgapsd (src/daemon/registry.c) and the loader's
 * checks under it (src/common/plugin_loader.c), on a directory of fake
 * plugins (fake_plugin.c built with different descriptors): discovery by kind,
 * ordered by priority; a plugin of another ABI version, of the wrong kind, or
 * a transport without a valid data-port offset is left out with its reason;
 * two transports on one data port are refused; the configuration's plugin
 * names are checked against what was found, naming the key and what exists.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_file.h"
#include "registry.h"

#ifndef FAKE_DIR
#error "FAKE_DIR: the directory holding the fake plugins"
#endif

struct fx {
	char dir[PATH_MAX];
	char why[8][640];
	int nwhy;
};

/* A directory with the named fake plugins (linked from FAKE_DIR) under their plugin names. */
static void make_dir(struct fx *fx, const char *const *files)
{
	char src[PATH_MAX + 64], dst[PATH_MAX + 64];

	snprintf(fx->dir, sizeof(fx->dir), "/tmp/rgaps-test-registry-XXXXXX");
	assert_non_null(mkdtemp(fx->dir));
	for (int i = 0; files[i]; i += 2) {
		snprintf(src, sizeof(src), "%s/%s", FAKE_DIR, files[i]);
		snprintf(dst, sizeof(dst), "%s/%s", fx->dir, files[i + 1]);
		assert_int_equal(symlink(src, dst), 0);
	}
}

static void remove_dir(struct fx *fx)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fx->dir);
	assert_int_equal(system(cmd), 0);
}

static void on_skipped(void *arg, const char *why)
{
	struct fx *fx = arg;

	if (fx->nwhy < 8)
		snprintf(fx->why[fx->nwhy++], sizeof(fx->why[0]), "%s", why);
}

static bool skipped_with(struct fx *fx, const char *needle)
{
	for (int i = 0; i < fx->nwhy; i++)
		if (strstr(fx->why[i], needle))
			return true;
	return false;
}

static void test_discover(void **state)
{
	static const char *const files[] = {
		"fake-mem-hi.so", "memory-hi.so", "fake-mem-lo.so", "memory-lo.so",
		"fake-mem-never.so", "memory-never.so", "fake-tr-a.so", "transport-a.so",
		"fake-tr-b.so", "transport-b.so", "fake-tr-oldabi.so", "transport-old.so",
		"fake-tr-noport.so", "transport-noport.so", "fake-mem-hi.so", "transport-hi.so",
		"fake-tr-a.so", "transport-Bad.so", NULL,
	};
	struct fx fx = { 0 };
	struct rgaps_plugin_info *l;
	char want[96];
	uint32_t n;

	make_dir(&fx, files);
	assert_int_equal(rgaps__plugin_discover(fx.dir, RGAPS_PLUGIN_MEMORY, &l, &n, on_skipped, &fx),
			 0);
	assert_int_equal(n, 3);
	assert_string_equal(l[0].name, "hi");
	assert_int_equal(l[0].priority, 30);
	assert_string_equal(l[1].name, "lo");
	assert_string_equal(l[2].name, "never");
	assert_int_equal(l[2].priority, 0);
	free(l);
	assert_int_equal(fx.nwhy, 0);

	assert_int_equal(rgaps__plugin_discover(fx.dir, RGAPS_PLUGIN_TRANSPORT, &l, &n, on_skipped,
						&fx), 0);
	assert_int_equal(n, 2);
	assert_string_equal(l[0].name, "b"); /* priority 20 before a's 10 */
	assert_int_equal(l[0].data_port_offset, 7);
	assert_string_equal(l[1].name, "a");
	free(l);
	snprintf(want, sizeof(want), "plugin ABI version 2, this rgaps needs %d: rebuild it",
		 RGAPS_PLUGIN_ABI_VERSION);
	if (!skipped_with(&fx, want))
		fail_msg("old ABI not refused: %s", fx.why[0]);
	if (!skipped_with(&fx, "data-port offset 0 is not in 1..99"))
		fail_msg("transport without a port offset not refused");
	if (!skipped_with(&fx, "does not describe transport plugin 'hi'"))
		fail_msg("memory plugin named as a transport not refused");
	if (!skipped_with(&fx, "'Bad' is not a plugin name"))
		fail_msg("bad file name not refused");
	remove_dir(&fx);

	/* No directory: no plugins, no error. */
	assert_int_equal(rgaps__plugin_discover("/nonexistent/rgaps", RGAPS_PLUGIN_MEMORY, &l, &n,
						NULL, NULL), 0);
	assert_int_equal(n, 0);
	assert_null(l);
}

static void test_port_clash(void **state)
{
	static const char *const files[] = {
		"fake-tr-a.so", "transport-a.so", "fake-tr-a2.so", "transport-a2.so", NULL,
	};
	struct rgapsd_registry reg;
	struct fx fx = { 0 };
	char err[512];

	make_dir(&fx, files);
	assert_int_equal(rgapsd_registry_scan(&reg, fx.dir, err, sizeof(err)), -EINVAL);
	if (!strstr(err, "transport plugins 'a' and 'a2'") ||
	    !strstr(err, "both declare data-port offset 5"))
		fail_msg("%s", err);
	remove_dir(&fx);
}

static void test_check_config(void **state)
{
	static const char *const files[] = {
		"fake-mem-hi.so", "memory-hi.so", "fake-mem-lo.so", "memory-lo.so",
		"fake-tr-a.so", "transport-a.so", "fake-stage-s.so", "stage-s.so", NULL,
	};
	struct rgapsd_registry reg;
	struct rgapsd_config cfg;
	struct rgaps_topic_config t;
	struct fx fx = { 0 };
	char err[512];

	make_dir(&fx, files);
	assert_int_equal(rgapsd_registry_scan(&reg, fx.dir, err, sizeof(err)), 0);
	assert_non_null(rgapsd_registry_find(&reg, RGAPS_PLUGIN_MEMORY, "lo"));
	assert_null(rgapsd_registry_find(&reg, RGAPS_PLUGIN_TRANSPORT, "lo"));
	rgapsd_registry_names(&reg, RGAPS_PLUGIN_MEMORY, err, sizeof(err));
	assert_string_equal(err, "hi, lo");

	rgapsd_config_defaults(&cfg);
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), 0); /* all auto */
	snprintf(cfg.topic_defaults.memory, sizeof(cfg.topic_defaults.memory), "lo");
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), 0);
	snprintf(cfg.topic_defaults.memory, sizeof(cfg.topic_defaults.memory), "cuda");
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), -EINVAL);
	if (!strstr(err, "defaults: key 'memory': no memory plugin 'cuda' in") ||
	    !strstr(err, "(found: hi, lo)"))
		fail_msg("%s", err);
	rgapsd_config_defaults(&cfg);

	/* A topic file's transport and stages. */
	t = cfg.topic_defaults;
	snprintf(t.name, sizeof(t.name), "cam");
	snprintf(t.transport, sizeof(t.transport), "tcp");
	cfg.topics = &t;
	cfg.ntopics = 1;
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), -EINVAL);
	if (!strstr(err, "topic 'cam': key 'transport': no transport plugin 'tcp'") ||
	    !strstr(err, "(found: a)"))
		fail_msg("%s", err);
	snprintf(t.transport, sizeof(t.transport), "auto");
	t.nstages = 2;
	snprintf(t.stages[0], sizeof(t.stages[0]), "s");
	snprintf(t.stages[1], sizeof(t.stages[1]), "zip");
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), -EINVAL);
	if (!strstr(err, "topic 'cam': key 'stages': no stage plugin 'zip'") ||
	    !strstr(err, "(found: s)"))
		fail_msg("%s", err);
	t.nstages = 1;
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), 0);
	/* "auto" is no stage. */
	snprintf(t.stages[0], sizeof(t.stages[0]), "auto");
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), -EINVAL);
	cfg.topics = NULL;
	cfg.ntopics = 0;

	snprintf(cfg.transport_options, sizeof(cfg.transport_options), "{\"a\": {}, \"udp\": {}}");
	assert_int_equal(rgapsd_registry_check(&reg, &cfg, err, sizeof(err)), -EINVAL);
	if (!strstr(err, "key 'transport_options.udp': no transport plugin 'udp'"))
		fail_msg("%s", err);
	rgapsd_registry_free(&reg);
	remove_dir(&fx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_discover),
		cmocka_unit_test(test_port_clash),
		cmocka_unit_test(test_check_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
