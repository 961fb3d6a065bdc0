/*
 * Unit tests of the configuration tables (src/common/config.c): defaults with
 * no file, a full valid file with topics.d, every class of refusal (each one
 * checked for the exact "FILE: key 'KEY': " prefix and the reason), the size
 * parser and formatter, topic names, the JSON view and the --help-config text.
 * Every test works in its own mkdtemp() directory, removed by its teardown.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config_file.h"
#include "log.h"
#include "util.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)
#define TiB (UINT64_C(1) << 40)

/* config.c's hook for the file that rgapsd_config_load(NULL, ...) reads. */

struct fx {
	char dir[64];
	char default_path[128];
	const char *saved_default_path;
	char err[1024];
};

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));

	if (!fx)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/rgaps-test-config-XXXXXX");
	if (!mkdtemp(fx->dir)) {
		free(fx);
		return -1;
	}
	/* No test may depend on what the machine has in /etc/rgaps. */
	snprintf(fx->default_path, sizeof(fx->default_path), "%s/absent/rgapsd.json", fx->dir);
	fx->saved_default_path = rgapsd_config_default_path;
	rgapsd_config_default_path = fx->default_path;
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int rc;

	rgapsd_config_default_path = fx->saved_default_path;
	rc = nftw(fx->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	free(fx);
	return rc;
}

/* Write dir/rel, making dir and rel's parents; the full path goes to path_p (if not NULL). */
static void put(const char *dir, const char *rel, const char *text, char *path_p, size_t len)
{
	size_t dlen = strlen(dir);
	char path[512], *slash;
	FILE *f;

	assert_true(dlen + 1 + strlen(rel) < sizeof(path));
	if (mkdir(dir, 0700) < 0)
		assert_int_equal(errno, EEXIST);
	memcpy(path, dir, dlen);
	path[dlen] = '/';
	memcpy(path + dlen + 1, rel, strlen(rel) + 1);
	for (slash = strchr(path + dlen + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		if (mkdir(path, 0700) < 0)
			assert_int_equal(errno, EEXIST);
		*slash = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	if (path_p)
		snprintf(path_p, len, "%s", path);
}

/* err must start with exactly "FILE: key 'KEY': " and hold reason. */
static void check_err(const char *err, const char *file, const char *key, const char *reason)
{
	char want[768];

	snprintf(want, sizeof(want), "%s: key '%s': ", file, key);
	if (strncmp(err, want, strlen(want)) != 0 || !strstr(err + strlen(want), reason))
		fail_msg("error was \"%s\", wanted prefix \"%s\" and reason \"%s\"", err,
			 want, reason);
}

static void check_err_file(const char *err, const char *file, const char *reason)
{
	char want[768];

	snprintf(want, sizeof(want), "%s: ", file);
	if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, reason))
		fail_msg("error was\n  \"%s\"\nwanted prefix \"%s\" and \"%s\"", err, want, reason);
}

static void check_topic_defaults(const struct rgaps_topic_config *tc)
{
	assert_int_equal(tc->pool_size, 256 * MiB);
	assert_int_equal(tc->max_message_size, 64 * MiB);
	assert_int_equal(tc->queue_depth, 64);
	assert_int_equal(tc->history, 0);
	assert_int_equal(tc->max_subscribers, 64);
	assert_int_equal(tc->max_publishers, 16);
	assert_int_equal(tc->max_holds, 16);
	assert_int_equal(tc->max_loans, 8);
	assert_int_equal(tc->block_timeout_ms, 1000);
	assert_int_equal(tc->overflow, RGAPS_OVERFLOW_BLOCK);
	assert_string_equal(tc->memory, "auto");
	assert_string_equal(tc->transport, "auto");
	assert_int_equal(tc->device, 0);
	assert_int_equal(tc->chunk_size, 16 * MiB);
	assert_true(tc->chunking);
	assert_int_equal(tc->ring_size, 64 * MiB);
	assert_true(tc->watermark == 0.25);
	assert_int_equal(tc->nstages, 0);
	assert_int_equal(tc->nallowed_uids, 0);
	assert_int_equal(tc->nallowed_gids, 0);
}

/* ------------------------------------------------------------------------ */

static void test_defaults_without_file(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	struct rgaps_topic_config tc;

	memset(&cfg, 0xa5, sizeof(cfg));
	assert_int_equal(rgapsd_config_load(NULL, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_string_equal(cfg.socket_path, "/run/rgaps/rgapsd.sock");
	assert_string_equal(cfg.socket_path, RGAPS_DEFAULT_SOCKET);
	assert_string_equal(cfg.instance, "");
	assert_string_equal(cfg.plugin_dir, "");
	assert_string_equal(cfg.topics_dir, "");
	assert_int_equal(cfg.log_level, RGAPS_LOG_INFO);
	assert_string_equal(cfg.listen, "");
	assert_int_equal(cfg.npeers, 0);
	assert_string_equal(cfg.key_file, "");
	assert_int_equal(cfg.keepalive_ms, 2000);
	assert_string_equal(cfg.topic_defaults.name, "");
	check_topic_defaults(&cfg.topic_defaults);
	assert_null(cfg.topics);
	assert_int_equal(cfg.ntopics, 0);

	rgapsd_topic_config_defaults(&tc);
	assert_memory_equal(&tc, &cfg.topic_defaults, sizeof(tc));
	/* The defaults pass validation once the topic has a name, and only then. */
	assert_int_equal(rgapsd_topic_config_validate(&tc, "defaults", fx->err, sizeof(fx->err)),
			 -EINVAL);
	check_err(fx->err, "defaults", "name", "is not a topic name");
	snprintf(tc.name, sizeof(tc.name), "t");
	assert_int_equal(rgapsd_topic_config_validate(&tc, "defaults", fx->err, sizeof(fx->err)),
			 0);
	rgapsd_config_free(&cfg);
	rgapsd_config_free(&cfg); /* twice is harmless */
	assert_null(cfg.topics);
}

static void test_default_path_is_read(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512];

	put(fx->dir, "absent/rgapsd.json", "{\"keepalive_ms\": 250}", path, sizeof(path));
	put(fx->dir, "absent/topics.d/cam0.json", "{}", NULL, 0);
	assert_int_equal(rgapsd_config_load(NULL, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cfg.keepalive_ms, 250);
	assert_int_equal(cfg.ntopics, 1);
	assert_string_equal(cfg.topics[0].name, "cam0");
	rgapsd_config_free(&cfg);

	/* A broken default file is an error, not a silent fall back to defaults. */
	put(fx->dir, "absent/rgapsd.json", "{\"keepalive_ms\": 5}", NULL, 0);
	assert_int_equal(rgapsd_config_load(NULL, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, path, "keepalive_ms", "must be between 10 and 3600000 (got 5)");
	rgapsd_config_free(&cfg);
}

static void test_missing_explicit_file(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512];

	snprintf(path, sizeof(path), "%s/nope.json", fx->dir);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -ENOENT);
	check_err_file(fx->err, path, "No such file or directory");
	assert_null(cfg.topics);
	rgapsd_config_free(&cfg);

	/* A directory is not a config file. */
	assert_int_equal(rgapsd_config_load(fx->dir, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, fx->dir, "not a regular file");
	rgapsd_config_free(&cfg);
}

static void test_full_valid_file(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	const struct rgaps_topic_config *a, *b, *c;
	char path[512], want[512];

	put(fx->dir, "rgapsd.json",
	    "{\n"
	    "  \"socket\": \"/tmp/rgaps-x.sock\",\n"
	    "  \"instance\": \"test-1\",\n"
	    "  \"plugin_dir\": \"/opt/rgaps/plugins\",\n"
	    "  \"topics_dir\": \"\",\n"
	    "  \"log_level\": \"debug\",\n"
	    "  \"listen\": \"0.0.0.0:7400\",\n"
	    "  \"peers\": [\"10.0.0.2:7400\", \"[fe80::1]:7400\", \"node-3.local:7401\"],\n"
	    "  \"key_file\": \"/etc/rgaps/psk\",\n"
	    "  \"keepalive_ms\": 500,\n"
	    "  \"defaults\": {\n"
	    "    \"pool_size\": \"1.5GiB\", \"queue_depth\": 128, \"overflow\": \"drop_oldest\",\n"
	    "    \"allowed_uids\": [1000, 0], \"watermark\": 0.5, \"chunk_size\": \"8 MiB\"\n"
	    "  }\n"
	    "}\n",
	    path, sizeof(path));
	put(fx->dir, "topics.d/b.json",
	    "{\"name\": \"renamed.topic\", \"pool_size\": 8388608, \"max_message_size\": \"4 KiB\","
	    " \"queue_depth\": 1024, \"history\": 1023, \"max_subscribers\": 1024,"
	    " \"max_publishers\": 256, \"max_holds\": 256, \"max_loans\": 256,"
	    " \"block_timeout_ms\": 0, \"overflow\": \"block\", \"memory\": \"cuda\","
	    " \"transport\": \"verbs\", \"device\": 3, \"chunk_size\": \"4KiB\","
	    " \"chunking\": false, \"ring_size\": \"8KiB\", \"watermark\": 0,"
	    " \"stages\": [\"checksum\", \"lz4\"], \"allowed_uids\": [],"
	    " \"allowed_gids\": [27, 4294967294]}",
	    NULL, 0);
	put(fx->dir, "topics.d/a.json", "{\"history\": 3}", NULL, 0);
	put(fx->dir, "topics.d/c_1.json", "{\"ring_size\": \"1G\", \"chunk_size\": \"512MiB\"}",
	    NULL, 0);
	/* Not topic files: skipped. */
	put(fx->dir, "topics.d/README", "not json", NULL, 0);
	put(fx->dir, "topics.d/.hidden.json", "not json", NULL, 0);
	put(fx->dir, "topics.d/a.json~", "not json", NULL, 0);
	put(fx->dir, "topics.d/.json", "not json", NULL, 0);

	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_string_equal(cfg.socket_path, "/tmp/rgaps-x.sock");
	assert_string_equal(cfg.instance, "test-1");
	assert_string_equal(cfg.plugin_dir, "/opt/rgaps/plugins");
	snprintf(want, sizeof(want), "%s/topics.d", fx->dir);
	assert_string_equal(cfg.topics_dir, want);
	assert_int_equal(cfg.log_level, RGAPS_LOG_DEBUG);
	assert_string_equal(cfg.listen, "0.0.0.0:7400");
	assert_int_equal(cfg.npeers, 3);
	assert_string_equal(cfg.peers[0], "10.0.0.2:7400");
	assert_string_equal(cfg.peers[1], "[fe80::1]:7400");
	assert_string_equal(cfg.peers[2], "node-3.local:7401");
	assert_string_equal(cfg.key_file, "/etc/rgaps/psk");
	assert_int_equal(cfg.keepalive_ms, 500);
	assert_int_equal(cfg.topic_defaults.pool_size, 3 * GiB / 2);
	assert_int_equal(cfg.topic_defaults.queue_depth, 128);

	/* Sorted by file name: a.json, b.json, c_1.json. */
	assert_int_equal(cfg.ntopics, 3);
	a = &cfg.topics[0];
	b = &cfg.topics[1];
	c = &cfg.topics[2];

	/* a.json: name from the file, everything else from "defaults". */
	assert_string_equal(a->name, "a");
	assert_int_equal(a->history, 3);
	assert_int_equal(a->pool_size, 3 * GiB / 2);
	assert_int_equal(a->queue_depth, 128);
	assert_int_equal(a->overflow, RGAPS_OVERFLOW_DROP_OLDEST);
	assert_int_equal(a->nallowed_uids, 2);
	assert_int_equal(a->allowed_uids[0], 1000);
	assert_int_equal(a->allowed_uids[1], 0);
	assert_true(a->watermark == 0.5);
	assert_int_equal(a->chunk_size, 8 * MiB);
	assert_int_equal(a->max_message_size, 64 * MiB); /* untouched: the table's default */

	/* b.json: every key given; an empty array replaces the default's. */
	assert_string_equal(b->name, "renamed.topic");
	assert_int_equal(b->pool_size, 8 * MiB);
	assert_int_equal(b->max_message_size, 4 * KiB);
	assert_int_equal(b->queue_depth, 1024);
	assert_int_equal(b->history, 1023);
	assert_int_equal(b->max_subscribers, 1024);
	assert_int_equal(b->max_publishers, 256);
	assert_int_equal(b->max_holds, 256);
	assert_int_equal(b->max_loans, 256);
	assert_int_equal(b->block_timeout_ms, 0);
	assert_int_equal(b->overflow, RGAPS_OVERFLOW_BLOCK);
	assert_string_equal(b->memory, "cuda");
	assert_string_equal(b->transport, "verbs");
	assert_int_equal(b->device, 3);
	assert_int_equal(b->chunk_size, 4 * KiB);
	assert_false(b->chunking);
	assert_int_equal(b->ring_size, 8 * KiB);
	assert_true(b->watermark == 0.0);
	assert_int_equal(b->nstages, 2);
	assert_string_equal(b->stages[0], "checksum");
	assert_string_equal(b->stages[1], "lz4");
	assert_int_equal(b->nallowed_uids, 0);
	assert_int_equal(b->nallowed_gids, 2);
	assert_int_equal(b->allowed_gids[0], 27);
	assert_int_equal(b->allowed_gids[1], 4294967294u);

	assert_string_equal(c->name, "c_1");
	assert_int_equal(c->ring_size, GiB);
	assert_int_equal(c->chunk_size, 512 * MiB); /* exactly half the ring: allowed */

	rgapsd_config_free(&cfg);
	assert_null(cfg.topics);
	assert_int_equal(cfg.ntopics, 0);
}

static void test_topics_dir(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512], want[512];

	/* Relative: from the config file's directory. */
	put(fx->dir, "etc/rgapsd.json", "{\"topics_dir\": \"mine\"}", path, sizeof(path));
	put(fx->dir, "etc/mine/t1.json", "{}", NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	snprintf(want, sizeof(want), "%s/etc/mine", fx->dir);
	assert_string_equal(cfg.topics_dir, want);
	assert_int_equal(cfg.ntopics, 1);
	assert_string_equal(cfg.topics[0].name, "t1");
	rgapsd_config_free(&cfg);

	/* Absolute. */
	snprintf(want, sizeof(want), "{\"topics_dir\": \"%s/etc/mine\"}", fx->dir);
	put(fx->dir, "etc/rgapsd.json", want, NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cfg.ntopics, 1);
	rgapsd_config_free(&cfg);

	/* Derived ("" = topics.d beside the file) and absent: no topics, no error. */
	put(fx->dir, "etc/rgapsd.json", "{}", NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	snprintf(want, sizeof(want), "%s/etc/topics.d", fx->dir);
	assert_string_equal(cfg.topics_dir, want);
	assert_int_equal(cfg.ntopics, 0);
	assert_null(cfg.topics);
	rgapsd_config_free(&cfg);

	/* Given explicitly and absent: an error naming the key and the directory. */
	put(fx->dir, "etc/rgapsd.json", "{\"topics_dir\": \"nope\"}", NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -ENOENT);
	snprintf(want, sizeof(want), "cannot open '%s/etc/nope': No such file or directory",
		 fx->dir);
	check_err(fx->err, path, "topics_dir", want);
	rgapsd_config_free(&cfg);

	/* A directory named like a topic file is refused, not skipped. */
	put(fx->dir, "etc/topics.d/sub.json/x", "", NULL, 0);
	put(fx->dir, "etc/rgapsd.json", "{}", NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	snprintf(want, sizeof(want), "%s/etc/topics.d/sub.json", fx->dir);
	check_err_file(fx->err, want, "not a regular file");
	rgapsd_config_free(&cfg);
}

/* ------------------------------------------------------------------------ */
/* Refusals: one row per case, each in a fresh directory.                   */

struct reject {
	const char *daemon;     /* rgapsd.json ("{}" when NULL) */
	const char *topic_file; /* topics.d/<topic_file>, when topic is set ("t.json" if NULL) */
	const char *topic;
	const char *key;
	const char *reason;
};

static const struct reject rejects[] = {
	/* unknown keys, at the top level, in defaults, in a topic file */
	{ "{\"sockett\": \"/x\"}", NULL, NULL, "sockett", "unknown key (did you mean 'socket'?)" },
	{ "{\"bogus\": 1}", NULL, NULL, "bogus", "unknown key" },
	{ "{\"defaults\": {\"pool_sise\": 1}}", NULL, NULL, "defaults.pool_sise",
	  "unknown key (did you mean 'pool_size'?)" },
	{ "{\"defaults\": {\"nope\": 1}}", NULL, NULL, "defaults.nope", "unknown key" },
	{ NULL, NULL, "{\"queue_dept\": 8}", "queue_dept",
	  "unknown key (did you mean 'queue_depth'?)" },
	{ NULL, NULL, "{\"socket\": \"/x\"}", "socket", "unknown key" },
	{ "{\"defaults\": {\"name\": \"x\"}}", NULL, NULL, "defaults.name",
	  "belongs in a topic file, not in defaults" },
	{ "{\"socket\": \"/a\", \"socket\": \"/b\"}", NULL, NULL, "socket",
	  "given more than once" },
	{ NULL, NULL, "{\"history\": 1, \"history\": 2}", "history", "given more than once" },

	/* wrong JSON type, for every type of key */
	{ "{\"socket\": 5}", NULL, NULL, "socket", "expected a string, got a number" },
	{ "{\"key_file\": false}", NULL, NULL, "key_file", "expected a string, got a boolean" },
	{ NULL, NULL, "{\"memory\": 1}", "memory", "expected a string, got a number" },
	{ NULL, NULL, "{\"overflow\": true}", "overflow",
	  "expected a string (one of the names), got a boolean" },
	{ "{\"log_level\": null}", NULL, NULL, "log_level", "got null" },
	{ NULL, NULL, "{\"queue_depth\": \"64\"}", "queue_depth",
	  "expected an integer, got a string" },
	{ "{\"keepalive_ms\": [1]}", NULL, NULL, "keepalive_ms",
	  "expected an integer, got an array" },
	{ NULL, NULL, "{\"pool_size\": true}", "pool_size",
	  "expected a size (a number of bytes, or a string such as \"256MiB\"), got a boolean" },
	{ NULL, NULL, "{\"ring_size\": {}}", "ring_size", "expected a size" },
	{ NULL, NULL, "{\"chunking\": \"yes\"}", "chunking",
	  "expected true or false, got a string" },
	{ NULL, NULL, "{\"chunking\": 1}", "chunking", "expected true or false, got a number" },
	{ NULL, NULL, "{\"watermark\": \"0.5\"}", "watermark", "expected a number, got a string" },
	{ "{\"peers\": \"a:1\"}", NULL, NULL, "peers",
	  "expected an array of strings, got a string" },
	{ "{\"peers\": [\"a:1\", 2]}", NULL, NULL, "peers",
	  "entry 1: expected a string, got a number" },
	{ NULL, NULL, "{\"stages\": {}}", "stages", "expected an array of strings, got an object" },
	{ NULL, NULL, "{\"allowed_uids\": \"0\"}", "allowed_uids",
	  "expected an array of integers, got a string" },
	{ NULL, NULL, "{\"allowed_gids\": [1, \"2\"]}", "allowed_gids",
	  "entry 1: expected an integer, got a string" },
	{ "{\"defaults\": []}", NULL, NULL, "defaults", "expected an object, got an array" },
	{ NULL, NULL, "{\"name\": 5}", "name", "expected a string, got a number" },

	/* the limits on clients */
	{ "{\"socket_mode\": \"999\"}", NULL, NULL, "socket_mode", "is not a permission mode" },
	{ "{\"socket_mode\": \"4755\"}", NULL, NULL, "socket_mode", "is not a permission mode" },
	{ "{\"socket_mode\": \"66\"}", NULL, NULL, "socket_mode", "is not a permission mode" },
	{ "{\"socket_mode\": 438}", NULL, NULL, "socket_mode", "expected a string" },
	{ "{\"socket_group\": \"-g\"}", NULL, NULL, "socket_group",
	  "is not a group name or number" },
	{ "{\"socket_group\": \"a b\"}", NULL, NULL, "socket_group", "may only hold" },
	{ "{\"max_connections\": 0}", NULL, NULL, "max_connections",
	  "must be between 1 and 65536 (got 0)" },
	{ "{\"max_connections_per_user\": 70000}", NULL, NULL, "max_connections_per_user",
	  "must be between 1 and 65536 (got 70000)" },
	{ "{\"idle_timeout_ms\": 10}", NULL, NULL, "idle_timeout_ms",
	  "must be between 100 and 86400000 (got 10)" },
	{ "{\"frame_timeout_ms\": 600001}", NULL, NULL, "frame_timeout_ms",
	  "must be between 100 and 600000 (got 600001)" },
	{ "{\"max_unsent_replies\": \"1KiB\"}", NULL, NULL, "max_unsent_replies",
	  "must be between 64KiB and 1GiB (got 1KiB)" },
	{ "{\"max_topics\": 0}", NULL, NULL, "max_topics", "must be between 1 and 1048576 (got 0)" },
	{ "{\"max_topics_per_user\": -1}", NULL, NULL, "max_topics_per_user",
	  "must be between 0 and 1048576 (got -1)" },
	{ "{\"create_topics\": \"some\"}", NULL, NULL, "create_topics",
	  "must be one of any, configured (got 'some')" },

	/* numbers out of bounds, not whole, not a power of two */
	{ NULL, NULL, "{\"queue_depth\": 100}", "queue_depth", "must be a power of two (got 100)" },
	{ NULL, NULL, "{\"queue_depth\": 1}", "queue_depth",
	  "must be between 2 and 65536 (got 1)" },
	{ NULL, NULL, "{\"queue_depth\": 131072}", "queue_depth",
	  "must be between 2 and 65536 (got 131072)" },
	{ NULL, NULL, "{\"queue_depth\": 1e30}", "queue_depth", "must be between 2 and 65536" },
	{ NULL, NULL, "{\"max_subscribers\": 0}", "max_subscribers",
	  "must be between 1 and 1024 (got 0)" },
	{ NULL, NULL, "{\"max_subscribers\": 2000}", "max_subscribers",
	  "must be between 1 and 1024 (got 2000)" },
	{ NULL, NULL, "{\"max_publishers\": 300}", "max_publishers",
	  "must be between 1 and 256 (got 300)" },
	{ NULL, NULL, "{\"max_holds\": 0}", "max_holds", "must be between 1 and 256 (got 0)" },
	{ NULL, NULL, "{\"max_loans\": 257}", "max_loans", "must be between 1 and 256 (got 257)" },
	{ NULL, NULL, "{\"history\": 70000}", "history",
	  "must be between 0 and 65535 (got 70000)" },
	{ NULL, NULL, "{\"block_timeout_ms\": 3600001}", "block_timeout_ms",
	  "must be between 0 and 3600000 (got 3600001)" },
	{ NULL, NULL, "{\"device\": -1}", "device", "must be between 0 and 1023 (got -1)" },
	{ NULL, NULL, "{\"device\": 2.5}", "device", "must be a whole number (got 2.5)" },
	{ "{\"keepalive_ms\": 0}", NULL, NULL, "keepalive_ms",
	  "must be between 10 and 3600000 (got 0)" },
	{ "{\"keepalive_ms\": 1.5}", NULL, NULL, "keepalive_ms",
	  "must be a whole number (got 1.5)" },
	{ NULL, NULL, "{\"chunk_size\": \"1KiB\"}", "chunk_size",
	  "must be between 4KiB and 1GiB (got 1KiB)" },
	{ NULL, NULL, "{\"chunk_size\": \"2GiB\"}", "chunk_size",
	  "must be between 4KiB and 1GiB (got 2GiB)" },
	{ NULL, NULL, "{\"pool_size\": 0}", "pool_size", "must be between 4KiB and 1TiB (got 0B)" },
	{ NULL, NULL, "{\"pool_size\": -1}", "pool_size",
	  "must be between 4KiB and 1TiB (got -1)" },
	{ NULL, NULL, "{\"pool_size\": 4096.5}", "pool_size",
	  "must be a whole number of bytes (got 4096.5)" },
	{ NULL, NULL, "{\"max_message_size\": 0}", "max_message_size",
	  "must be between 1B and 1TiB (got 0B)" },
	{ NULL, NULL, "{\"ring_size\": \"128GiB\"}", "ring_size",
	  "must be between 8KiB and 64GiB (got 128GiB)" },
	{ NULL, NULL, "{\"watermark\": 1.5}", "watermark", "must be between 0 and 1 (got 1.5)" },
	{ NULL, NULL, "{\"watermark\": -0.1}", "watermark", "must be between 0 and 1 (got -0.1)" },
	{ NULL, NULL, "{\"allowed_uids\": [-1]}", "allowed_uids",
	  "entry 0: must be between 0 and 4294967294 (got -1)" },
	{ NULL, NULL, "{\"allowed_uids\": [4294967295]}", "allowed_uids",
	  "entry 0: must be between 0 and 4294967294 (got 4294967295)" },
	{ NULL, NULL, "{\"allowed_uids\": [0.5]}", "allowed_uids",
	  "entry 0: must be a whole number (got 0.5)" },
	{ NULL, NULL, "{\"allowed_uids\": [1000, 7, 1000]}", "allowed_uids",
	  "entry 2 repeats entry 0 (1000)" },
	{ NULL, NULL, "{\"allowed_gids\": [5, 5]}", "allowed_gids", "entry 1 repeats entry 0 (5)" },

	/* strings: emptiness, length, characters, HOST:PORT */
	{ "{\"socket\": \"\"}", NULL, NULL, "socket", "must not be empty" },
	{ "{\"instance\": \"a/b\"}", NULL, NULL, "instance",
	  "'a/b' may only hold A-Z a-z 0-9 . _ -" },
	{ "{\"instance\": \"0123456789012345678901234567890123\"}", NULL, NULL, "instance",
	  "is too long (34 bytes, at most 31)" },
	{ "{\"listen\": \"h:70000\"}", NULL, NULL, "listen",
	  "'h:70000': the port must be 1..65535" },
	{ "{\"listen\": \"h:0\"}", NULL, NULL, "listen", "the port must be 1..65535" },
	{ "{\"listen\": \"7400\"}", NULL, NULL, "listen", "'7400' is not HOST:PORT" },
	{ "{\"listen\": \":7400\"}", NULL, NULL, "listen", "is not HOST:PORT" },
	{ "{\"listen\": \"h:74a\"}", NULL, NULL, "listen", "is not HOST:PORT" },
	{ "{\"listen\": \"my host:1\"}", NULL, NULL, "listen", "is not HOST:PORT" },
	{ "{\"peers\": [\"nohost\"]}", NULL, NULL, "peers", "entry 0: 'nohost' is not HOST:PORT" },
	{ "{\"peers\": [\"::1:80\"]}", NULL, NULL, "peers",
	  "entry 0: '::1:80': write an IPv6 address in brackets" },
	{ "{\"peers\": [\"[::1:80\"]}", NULL, NULL, "peers", "is not HOST:PORT" },
	{ "{\"peers\": [\"\"]}", NULL, NULL, "peers", "entry 0: '' is not HOST:PORT" },
	{ "{\"peers\": [\"a:1\", \"b:2\", \"a:1\"]}", NULL, NULL, "peers",
	  "entry 2 repeats entry 0 ('a:1')" },
	{ NULL, NULL, "{\"stages\": [\"ok\", \"\"]}", "stages",
	  "entry 1: '' is not a plugin name (1 to 31 of a-z 0-9 _ -)" },
	{ NULL, NULL, "{\"stages\": [\"a b\"]}", "stages", "entry 0: 'a b' is not a plugin name" },
	{ NULL, NULL, "{\"stages\": [\"crc\", \"crc\"]}", "stages",
	  "entry 1 repeats entry 0 ('crc')" },
	{ NULL, NULL, "{\"stages\": [\"0123456789012345678901234567890123\"]}", "stages",
	  "entry 0: '0123456789012345678901234567890123' is too long (34 bytes, at most 31)" },
	{ NULL, NULL,
	  "{\"stages\": [\"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\", \"i\"]}", "stages",
	  "too many entries (9, at most 8)" },

	/* names of choices */
	{ NULL, NULL, "{\"overflow\": \"drop_newest\"}", "overflow",
	  "must be one of block, drop_oldest (got 'drop_newest')" },
	/* plugin names: their form here; whether such a plugin exists, against the registry */
	{ NULL, NULL, "{\"memory\": \"GPU\"}", "memory",
	  "'GPU' is not a plugin name (1 to 31 of a-z 0-9 _ -)" },
	{ NULL, NULL, "{\"transport\": \"ib.v2\"}", "transport", "'ib.v2' is not a plugin name" },
	{ NULL, NULL, "{\"transport\": \"TCP\"}", "transport", "'TCP' is not a plugin name" },
	{ "{\"log_level\": \"verbose\"}", NULL, NULL, "log_level",
	  "must be one of error, warn, info, debug, trace (got 'verbose')" },
	{ "{\"defaults\": {\"memory\": \"\"}}", NULL, NULL, "defaults.memory",
	  "'' is not a plugin name" },
	{ "{\"listen\": \"a!b:7400\"}", NULL, NULL, "listen",
	  "'a!b:7400' is not HOST:PORT: a host name holds only A-Z a-z 0-9 . _ -" },
	{ "{\"peers\": [\"[fe80::zz]:1\"]}", NULL, NULL, "peers",
	  "entry 0: '[fe80::zz]:1' is not HOST:PORT: 'fe80::zz' is not an IPv6 address" },

	/* plugin options: the shape here, names and bounds when the plugins load */
	{ "{\"transport_options\": []}", NULL, NULL, "transport_options",
	  "expected an object of objects of integers, got an array" },
	{ "{\"transport_options\": {\"tcp\": 1}}", NULL, NULL, "transport_options",
	  "'tcp': expected an object of options, got a number" },
	{ "{\"transport_options\": {\"verbs\": {\"qps\": -1}}}", NULL, NULL,
	  "transport_options", "'verbs.qps': expected a non-negative integer" },
	{ "{\"transport_options\": {\"verbs\": {\"qps\": 1.5}}}", NULL, NULL,
	  "transport_options", "'verbs.qps': expected a non-negative integer" },
	{ "{\"transport_options\": {\"verbs\": {\"qps\": \"2\"}}}", NULL, NULL,
	  "transport_options", "'verbs.qps': expected a non-negative integer" },
	{ "{\"transport_options\": {\"verbs\": {\"qps\": 4}, \"tcp\": {}}}", NULL, "{}", NULL,
	  NULL },

	/* size strings that do not parse */
	{ NULL, NULL, "{\"pool_size\": \"12XB\"}", "pool_size", "'12XB' is not a size" },
	{ NULL, NULL, "{\"pool_size\": \"\"}", "pool_size", "'' is not a size" },
	{ NULL, NULL, "{\"pool_size\": \"MiB\"}", "pool_size", "'MiB' is not a size" },
	{ NULL, NULL, "{\"pool_size\": \"-1\"}", "pool_size", "'-1' is not a size" },
	{ NULL, NULL, "{\"pool_size\": \"99999999999TiB\"}", "pool_size",
	  "'99999999999TiB' is too large" },
	{ NULL, NULL, "{\"max_message_size\": \"1.5B\"}", "max_message_size",
	  "'1.5B' is not a whole number of bytes" },
	{ "{\"defaults\": {\"ring_size\": \"64 MiBs\"}}", NULL, NULL, "defaults.ring_size",
	  "'64 MiBs' is not a size (write a number of bytes, or one with a unit" },

	/* topic names */
	{ NULL, "bad name.json", "{}", "name",
	  "the file name gives no topic name: 'bad name' is not a topic name (a space is not "
	  "allowed): a topic name is 1 to 63 characters of A-Z a-z 0-9 . _ -, not starting with "
	  "'.' or '-'; set" },
	{ NULL, "-x.json", "{}", "name", "the file name gives no topic name: '-x'" },
	{ NULL, "bad name.json", "{\"name\": \"good\"}", NULL, NULL }, /* a name rescues it */
	{ NULL, NULL, "{\"name\": \"-x\"}", "name", "'-x' is not a topic name (it starts with '-')" },
	{ NULL, NULL, "{\"name\": \"\"}", "name", "'' is not a topic name (it is empty)" },
	{ NULL, NULL, "{\"name\": \"a/b\"}", "name", "'a/b' is not a topic name ('/' is not allowed)" },
	{ NULL, NULL,
	  "{\"name\": \"0123456789012345678901234567890123456789012345678901234567890123\"}",
	  "name", "is too long (64 bytes, at most 63)" },

	/* cross-field rules, in a topic file and in defaults */
	{ NULL, NULL, "{\"pool_size\": \"1MiB\"}", "max_message_size",
	  "64MiB is larger than pool_size (1MiB)" },
	{ NULL, NULL, "{\"queue_depth\": 8, \"history\": 8}", "history",
	  "must be less than queue_depth (8), got 8" },
	{ NULL, NULL, "{\"ring_size\": \"4MiB\"}", "chunk_size",
	  "16MiB is more than half of ring_size (4MiB)" },
	{ NULL, NULL, "{\"chunking\": false, \"ring_size\": \"32MiB\"}", "max_message_size",
	  "64MiB does not fit in ring_size (32MiB), and chunking is off" },
	{ NULL, NULL, "{\"chunking\": false, \"ring_size\": \"4MiB\", \"chunk_size\": \"4MiB\","
		      " \"max_message_size\": \"4MiB\"}", NULL, NULL }, /* no chunks: no rule */
	{ "{\"defaults\": {\"history\": 64}}", NULL, NULL, "defaults.history",
	  "must be less than queue_depth (64), got 64" },
	{ "{\"defaults\": {\"pool_size\": \"16MiB\"}}", NULL, NULL, "defaults.max_message_size",
	  "64MiB is larger than pool_size (16MiB)" },
	/* the "discovery" object and what it needs of the rest */
#define DISC_OK "\"listen\": \"10.0.0.1:7000\", \"key_file\": \"/k\", "
	{ "{" DISC_OK "\"discovery\": {\"endpoint\": []}}", NULL, NULL, "discovery.endpoint",
	  "unknown key (did you mean 'endpoints'?)" },
	{ "{" DISC_OK "\"discovery\": {\"endpoints\": [\"127.0.0.1:2379\"]}}", NULL, NULL,
	  "discovery.endpoints", "is not an etcd client URL" },
	{ "{" DISC_OK "\"discovery\": {\"endpoints\": [\"http://h\"]}}", NULL, NULL,
	  "discovery.endpoints", "'http://h': " },
	{ "{" DISC_OK "\"discovery\": {\"endpoints\": [\"http://h:1\", \"http://h:1\"]}}",
	  NULL, NULL, "discovery.endpoints", "entry 1 repeats entry 0" },
	{ "{" DISC_OK "\"discovery\": {\"prefix\": \"rgaps\"}}", NULL, NULL,
	  "discovery.prefix", "is not a key prefix" },
	{ "{" DISC_OK "\"discovery\": {\"prefix\": \"/a/\"}}", NULL, NULL, "discovery.prefix",
	  "is not a key prefix" },
	{ "{" DISC_OK "\"discovery\": {\"prefix\": \"/a b\"}}", NULL, NULL, "discovery.prefix",
	  "is not a key prefix" },
	{ "{" DISC_OK "\"discovery\": {\"lease_ttl_s\": 1}}", NULL, NULL,
	  "discovery.lease_ttl_s", "must be between 2 and 3600 (got 1)" },
	{ "{" DISC_OK "\"discovery\": {\"tls_cert\": \"/c.pem\"}}", NULL, NULL,
	  "discovery.tls_cert", "tls_cert and tls_key go together" },
	{ "{" DISC_OK "\"discovery\": {\"password_file\": \"/p\"}}", NULL, NULL,
	  "discovery.password_file", "username and password_file go together" },
	{ "{\"key_file\": \"/k\", \"discovery\": {\"endpoints\": [\"http://e:2379\"]}}", NULL,
	  NULL, "discovery.endpoints", "needs \"listen\"" },
	{ "{\"listen\": \"10.0.0.1:7000\", \"discovery\": {\"endpoints\": [\"http://e:2379\"]}}",
	  NULL, NULL, "discovery.endpoints", "needs \"key_file\"" },
	{ "{\"listen\": \"0.0.0.0:7000\", \"key_file\": \"/k\", \"discovery\": "
	  "{\"endpoints\": [\"http://e:2379\"]}}", NULL, NULL, "listen", "not a wildcard" },
	{ "{\"listen\": \"[::]:7000\", \"key_file\": \"/k\", \"discovery\": "
	  "{\"endpoints\": [\"http://e:2379\"]}}", NULL, NULL, "listen", "not a wildcard" },
#undef DISC_OK
	/* defaults that a topic file repairs are still refused: they must stand alone */
	{ "{\"defaults\": {\"ring_size\": \"6MiB\"}}", NULL, "{\"chunk_size\": \"1MiB\"}",
	  "defaults.chunk_size", "16MiB is more than half of ring_size (6MiB)" },
};

static void test_rejects(void **state)
{
	struct fx *fx = *state;

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(rejects); i++) {
		const struct reject *r = &rejects[i];
		struct rgapsd_config cfg;
		char dir[256], path[512], tpath[512], rel[128];
		const char *errfile;
		int rc;

		snprintf(dir, sizeof(dir), "%s/case%zu", fx->dir, i);
		put(dir, "rgapsd.json", r->daemon ? r->daemon : "{}", path, sizeof(path));
		errfile = path;
		if (r->topic) {
			snprintf(rel, sizeof(rel), "topics.d/%s",
				 r->topic_file ? r->topic_file : "t.json");
			put(dir, rel, r->topic, tpath, sizeof(tpath));
			if (!r->daemon)
				errfile = tpath;
		}
		fx->err[0] = '\0';
		rc = rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err));
		if (!r->key) {
			if (rc != 0)
				fail_msg("case %zu: refused: %s", i, fx->err);
			assert_int_equal(cfg.ntopics, 1);
		} else {
			if (rc != -EINVAL)
				fail_msg("case %zu (%s%s): rc %d, expected -EINVAL", i,
					 r->daemon ? r->daemon : "", r->topic ? r->topic : "", rc);
			check_err(fx->err, errfile, r->key, r->reason);
			assert_null(cfg.topics);
			assert_int_equal(cfg.ntopics, 0);
		}
		rgapsd_config_free(&cfg);
	}
}

/* A whole "discovery" object is read into its struct; without one, there is none. */
static void test_discovery(void **state)
{
	struct fx *fx = *state;
	const struct rgapsd_discovery_config *dc;
	struct rgapsd_config cfg;
	char path[512];

	put(fx->dir, "rgapsd.json", "{}", path, sizeof(path));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(cfg.discovery.nendpoints, 0);
	assert_string_equal(cfg.discovery.prefix, "/rgaps");
	assert_int_equal(cfg.discovery.lease_ttl_s, 10);
	assert_int_equal(cfg.discovery.timeout_ms, 2000);
	rgapsd_config_free(&cfg);

	put(fx->dir, "rgapsd.json",
	    "{\"listen\": \"[fd00::1]:7000\", \"key_file\": \"/k\", \"discovery\": {"
	    "\"endpoints\": [\"https://10.0.0.5:2379\", \"http://etcd-b:2379\"], "
	    "\"prefix\": \"/rgaps/prod\", \"lease_ttl_s\": 5, \"timeout_ms\": 500, "
	    "\"tls_ca\": \"/ca.pem\", \"tls_cert\": \"/c.pem\", \"tls_key\": \"/c.key\", "
	    "\"username\": \"rgaps\", \"password_file\": \"/pw\"}}",
	    path, sizeof(path));
	if (rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)) != 0)
		fail_msg("refused: %s", fx->err);
	dc = &cfg.discovery;
	assert_int_equal(dc->nendpoints, 2);
	assert_string_equal(dc->endpoints[0], "https://10.0.0.5:2379");
	assert_string_equal(dc->endpoints[1], "http://etcd-b:2379");
	assert_string_equal(dc->prefix, "/rgaps/prod");
	assert_int_equal(dc->lease_ttl_s, 5);
	assert_int_equal(dc->timeout_ms, 500);
	assert_string_equal(dc->tls_ca, "/ca.pem");
	assert_string_equal(dc->tls_cert, "/c.pem");
	assert_string_equal(dc->tls_key, "/c.key");
	assert_string_equal(dc->username, "rgaps");
	assert_string_equal(dc->password_file, "/pw");
	rgapsd_config_free(&cfg);
}

/* Arrays too long to write out in the table. */
static void test_reject_too_many(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char text[2048], path[512], tpath[512];
	size_t n;

	n = (size_t)snprintf(text, sizeof(text), "{\"allowed_uids\": [");
	for (int i = 0; i <= RGAPS_CFG_MAX_IDS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%d", i ? ", " : "", i);
	snprintf(text + n, sizeof(text) - n, "]}");
	put(fx->dir, "rgapsd.json", "{}", path, sizeof(path));
	put(fx->dir, "topics.d/many.json", text, tpath, sizeof(tpath));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, tpath, "allowed_uids", "too many entries (33, at most 32)");
	rgapsd_config_free(&cfg);
	assert_int_equal(unlink(tpath), 0);

	n = (size_t)snprintf(text, sizeof(text), "{\"peers\": [");
	for (int i = 0; i <= RGAPS_CFG_MAX_PEERS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\"h%d:1\"", i ? ", " : "", i);
	snprintf(text + n, sizeof(text) - n, "]}");
	put(fx->dir, "rgapsd.json", text, NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, path, "peers", "too many entries (17, at most 16)");
	rgapsd_config_free(&cfg);

	/* socket: sun_path holds 107 bytes and a NUL */
	n = (size_t)snprintf(text, sizeof(text), "{\"socket\": \"/");
	memset(text + n, 's', 107);
	snprintf(text + n + 107, sizeof(text) - n - 107, "\"}");
	put(fx->dir, "rgapsd.json", text, NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, path, "socket", "is too long (108 bytes, at most 107)");
	rgapsd_config_free(&cfg);
	text[n + 106] = '"';
	snprintf(text + n + 107, sizeof(text) - n - 107, "}");
	put(fx->dir, "rgapsd.json", text, NULL, 0);
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	assert_int_equal(strlen(cfg.socket_path), 107);
	rgapsd_config_free(&cfg);
}

static void test_invalid_json(void **state)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "{\"socket\": }", "line 1, column 12: near '}'" },
		{ "", "line 1, column 1: the text ends there" },
		{ "{\"a\": 1,}", "line 1, column 9: near '}'" },
		{ "{\"a\": 1} x", "line 1, column 10: near 'x'" },
		{ "{\"a\": [1, 2}", "line 1, column 12: near '}'" },
		{ "{\n\t\"a\": 1,\n\t\"b\": tru\n}", "line 3, column 7: near 'tru'" },
		{ "{\n\t\"a\": [1,\n", "line 2, column 10: the text ends there" },
	};
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512], tpath[512], want[640];

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cases); i++) {
		put(fx->dir, "rgapsd.json", cases[i].text, path, sizeof(path));
		assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
		snprintf(want, sizeof(want), "%s: invalid JSON at %s", path, cases[i].want);
		if (strncmp(fx->err, want, strlen(want)) != 0)
			fail_msg("'%s': error '%s', wanted it to start '%s'", cases[i].text, fx->err,
				 want);
		rgapsd_config_free(&cfg);
	}

	put(fx->dir, "rgapsd.json", "[1, 2]", path, sizeof(path));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, path, "expected a JSON object at the top level, got an array");
	rgapsd_config_free(&cfg);

	/* A \u0000 escape would cut a key or value short in cJSON: refused, not truncated. */
	put(fx->dir, "rgapsd.json", "{\"defaults\": {\"memory\": \"host\\u0000junk\"}}", path,
	    sizeof(path));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, path, "a \\u0000 escape near byte 29");
	rgapsd_config_free(&cfg);
	put(fx->dir, "rgapsd.json", "{\"pool_size\\u0000x\": 1}", path, sizeof(path));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, path, "keys and values may not hold NUL");
	rgapsd_config_free(&cfg);
	/* An escaped backslash before "u0000" is plain text (then refused as a memory name). */
	put(fx->dir, "rgapsd.json", "{\"defaults\": {\"memory\": \"host\\\\u0000\"}}", path,
	    sizeof(path));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, path, "is not a plugin name");
	rgapsd_config_free(&cfg);
	{
		static const char json[] = "{\"name\": \"cam\\u0000/x\"}";
		struct rgaps_topic_config tc;

		rgapsd_topic_config_defaults(&tc);
		assert_int_equal(rgapsd_topic_config_parse(json, strlen(json), "t.json", &tc,
							   fx->err, sizeof(fx->err)),
				 -EINVAL);
		check_err_file(fx->err, "t.json", "keys and values may not hold NUL");
	}

	/* In a topic file, the topic file is named. */
	put(fx->dir, "rgapsd.json", "{}", path, sizeof(path));
	put(fx->dir, "topics.d/broken.json", "{\"pool_size\": \"1MiB\"", tpath, sizeof(tpath));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, tpath, "invalid JSON at line");
	rgapsd_config_free(&cfg);
}

static void test_duplicate_topic(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512], a[512], b[512], want[1200];

	put(fx->dir, "rgapsd.json", "{}", path, sizeof(path));
	put(fx->dir, "topics.d/a.json", "{\"name\": \"t\"}", a, sizeof(a));
	put(fx->dir, "topics.d/b.json", "{\"name\": \"t\"}", b, sizeof(b));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	snprintf(want, sizeof(want), "topic 't' is already defined in %s", a);
	check_err(fx->err, b, "name", want);
	assert_null(cfg.topics);
	rgapsd_config_free(&cfg);

	/* A file-derived name collides with an explicit one just the same. */
	assert_int_equal(unlink(b), 0);
	put(fx->dir, "topics.d/t.json", "{}", b, sizeof(b));
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, b, "name", want);
	rgapsd_config_free(&cfg);
}

static void test_log_levels(void **state)
{
	static const char *const names[] = { "error", "warn", "info", "debug", "trace" };
	struct fx *fx = *state;
	struct rgapsd_config cfg;
	char path[512], text[64];

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(names); i++) {
		snprintf(text, sizeof(text), "{\"log_level\": \"%s\"}", names[i]);
		put(fx->dir, "rgapsd.json", text, path, sizeof(path));
		assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
		/* config.c's names must agree with log.c's */
		assert_int_equal(cfg.log_level, rgaps__log_level_parse(names[i]));
		assert_string_equal(rgaps__log_level_name(cfg.log_level), names[i]);
		rgapsd_config_free(&cfg);
	}
}

/* ------------------------------------------------------------------------ */
/* The topic API used by the control plane                                  */

static void test_topic_parse_api(void **state)
{
	struct fx *fx = *state;
	struct rgaps_topic_config tc, before;
	const char *good = "{\"name\": \"cam0\", \"pool_size\": \"1GiB\", \"stages\": [\"crc\"]}";
	const char *bad = "{\"pool_size\": \"1GiB\", \"memory\": \"GPU\"}";

	rgapsd_topic_config_defaults(&tc);
	assert_int_equal(rgapsd_topic_config_parse(good, strlen(good), "req", &tc, fx->err,
						  sizeof(fx->err)), 0);
	assert_string_equal(tc.name, "cam0");
	assert_int_equal(tc.pool_size, GiB);
	assert_int_equal(tc.nstages, 1);
	assert_string_equal(tc.stages[0], "crc");
	assert_int_equal(tc.queue_depth, 64);
	assert_int_equal(rgapsd_topic_config_validate(&tc, "req", fx->err, sizeof(fx->err)), 0);

	/* A refused object leaves *tc as it was, even keys set before the bad one. */
	before = tc;
	assert_int_equal(rgapsd_topic_config_parse(bad, strlen(bad), "req", &tc, fx->err,
						  sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "req", "memory", "'GPU' is not a plugin name");
	assert_memory_equal(&tc, &before, sizeof(tc));

	/* Only len bytes are read. */
	assert_int_equal(rgapsd_topic_config_parse("{}garbage", 2, "req", &tc, fx->err,
						  sizeof(fx->err)), 0);
	assert_int_equal(rgapsd_topic_config_parse("{\"history\": 1}", 5, "req", &tc, fx->err,
						  sizeof(fx->err)), -EINVAL);
	check_err_file(fx->err, "req", "invalid JSON at line");

	/* No name for the source, no error buffer: still refused, nothing written. */
	assert_int_equal(rgapsd_topic_config_parse(bad, strlen(bad), NULL, &tc, fx->err,
						  sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "topic", "memory", "is not a plugin name");
	assert_int_equal(rgapsd_topic_config_parse(bad, strlen(bad), "req", &tc, NULL, 0), -EINVAL);
	assert_memory_equal(&tc, &before, sizeof(tc));
}

/* The GPU keys: gpu_fanout's choices, devices as unique ordinals. */
static void test_gpu_keys(void **state)
{
	struct fx *fx = *state;
	struct rgaps_topic_config tc;
	const char *good = "{\"gpu_fanout\": \"replicate\", \"devices\": [0, 3, 1],"
			   " \"gpu_piece\": \"1MiB\"}";

	rgapsd_topic_config_defaults(&tc);
	assert_string_equal(tc.gpu_fanout, "auto");
	assert_int_equal(tc.ndevices, 0);
	assert_int_equal(tc.gpu_piece, 8 << 20);
	assert_int_equal(rgapsd_topic_config_parse(good, strlen(good), "g", &tc, fx->err,
						  sizeof(fx->err)), 0);
	assert_string_equal(tc.gpu_fanout, "replicate");
	assert_int_equal(tc.ndevices, 3);
	assert_int_equal(tc.devices[1], 3);
	assert_int_equal(tc.gpu_piece, 1 << 20);
#define BAD(json, key, why)                                                              \
	do {                                                                             \
		rgapsd_topic_config_defaults(&tc);                                        \
		assert_int_equal(rgapsd_topic_config_parse(json, strlen(json), "g", &tc,  \
							  fx->err, sizeof(fx->err)),     \
				 -EINVAL);                                               \
		check_err(fx->err, "g", key, why);                                       \
	} while (0)
	BAD("{\"gpu_fanout\": \"nvlink\"}", "gpu_fanout", "must be one of auto, peer, replicate");
	BAD("{\"devices\": [1, 1]}", "devices", "entry 1 repeats entry 0 (1)");
	BAD("{\"devices\": [1024]}", "devices", "1024");
	BAD("{\"devices\": [-1]}", "devices", "-1");
	BAD("{\"gpu_piece\": \"4KiB\"}", "gpu_piece", "64KiB");
#undef BAD
}

/* The relay key: auto by default, the topologies, a refusal that says what is taken. */
static void test_relay_key(void **state)
{
	struct fx *fx = *state;
	struct rgaps_topic_config tc;
	const char *good = "{\"relay\": \"tree:3\"}";

	rgapsd_topic_config_defaults(&tc);
	assert_string_equal(tc.relay, "auto");
	assert_int_equal(
		rgapsd_topic_config_parse(good, strlen(good), "r", &tc, fx->err, sizeof(fx->err)),
		0);
	assert_string_equal(tc.relay, "tree:3");
#define BAD(json, why)                                                                           \
	do {                                                                                     \
		rgapsd_topic_config_defaults(&tc);                                                \
		assert_int_equal(rgapsd_topic_config_parse(json, strlen(json), "r", &tc, fx->err, \
							  sizeof(fx->err)),                      \
				 -EINVAL);                                                       \
		check_err(fx->err, "r", "relay", why);                                           \
	} while (0)
	BAD("{\"relay\": \"ring\"}", "\"star\", \"chain\", \"tree:K\" or \"auto\"");
	BAD("{\"relay\": \"tree:1\"}", "from 2 to 64");
	BAD("{\"relay\": \"tree:65\"}", "from 2 to 64");
	BAD("{\"relay\": 2}", "");
#undef BAD
}

static void test_validate_api(void **state)
{
	struct fx *fx = *state;
	struct rgaps_topic_config base, tc;

	rgapsd_topic_config_defaults(&base);
	snprintf(base.name, sizeof(base.name), "ok");
	assert_int_equal(rgapsd_topic_config_validate(&base, "x", fx->err, sizeof(fx->err)), 0);

	/* Structs built in code get every check a file gets. */
	tc = base;
	tc.nallowed_uids = RGAPS_CFG_MAX_IDS + 1;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "allowed_uids", "too many entries (33, at most 32)");

	tc = base;
	tc.nallowed_gids = 2;
	tc.allowed_gids[0] = tc.allowed_gids[1] = 9;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "allowed_gids", "entry 1 repeats entry 0 (9)");

	tc = base;
	tc.queue_depth = 48;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "queue_depth", "must be a power of two (got 48)");

	tc = base;
	snprintf(tc.memory, sizeof(tc.memory), "Gpu");
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "memory", "'Gpu' is not a plugin name");

	tc = base;
	tc.max_message_size = 0;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "max_message_size", "must be between 1B and 1TiB (got 0B)");

	tc = base;
	tc.max_message_size = tc.pool_size + 1;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "max_message_size", "268435457B is larger than pool_size (256MiB)");

	tc = base;
	tc.watermark = NAN;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "watermark", "must be between 0 and 1");

	tc = base;
	tc.overflow = (enum rgaps_overflow)7;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "overflow", "holds 7");

	tc = base;
	tc.device = -1;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "device", "must be between 0 and 1023");

	tc = base;
	tc.nstages = 1;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "stages", "entry 0: '' is not a plugin name");

	tc = base;
	memset(tc.name, 'n', sizeof(tc.name));
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, sizeof(fx->err)), -EINVAL);
	check_err(fx->err, "x", "name", "is not NUL-terminated");

	/* A short error buffer truncates and stays a string. */
	tc = base;
	tc.history = tc.queue_depth;
	assert_int_equal(rgapsd_topic_config_validate(&tc, "x", fx->err, 12), -EINVAL);
	assert_string_equal(fx->err, "x: key 'his");
}

static void test_to_json(void **state)
{
	struct fx *fx = *state;
	struct rgaps_topic_config tc, back;
	const char *text = "{\"name\": \"j\", \"pool_size\": \"1.5GiB\","
			   " \"overflow\": \"drop_oldest\","
			   " \"stages\": [\"a\", \"b\"], \"allowed_uids\": [0, 1000],"
			   " \"allowed_gids\": [4294967294], \"watermark\": 0.125,"
			   " \"chunking\": false, \"memory\": \"host\"}";
	cJSON *o, *v;
	char *printed;
	int n = 0;

	rgapsd_topic_config_defaults(&tc);
	assert_int_equal(rgapsd_topic_config_parse(text, strlen(text), "j", &tc, fx->err,
						  sizeof(fx->err)), 0);
	o = rgapsd_topic_config_to_json(&tc);
	assert_non_null(o);
	cJSON_ArrayForEach(v, o)
		n++;
	assert_int_equal(n, 27); /* every topic key */

	v = cJSON_GetObjectItemCaseSensitive(o, "pool_size");
	assert_true(cJSON_IsNumber(v) && v->valuedouble == 1610612736.0);
	v = cJSON_GetObjectItemCaseSensitive(o, "max_message_size");
	assert_true(cJSON_IsNumber(v) && v->valuedouble == 67108864.0);
	v = cJSON_GetObjectItemCaseSensitive(o, "overflow");
	assert_true(cJSON_IsString(v) && strcmp(v->valuestring, "drop_oldest") == 0);
	v = cJSON_GetObjectItemCaseSensitive(o, "chunking");
	assert_true(cJSON_IsFalse(v));
	v = cJSON_GetObjectItemCaseSensitive(o, "watermark");
	assert_true(cJSON_IsNumber(v) && v->valuedouble == 0.125);
	v = cJSON_GetObjectItemCaseSensitive(o, "stages");
	assert_true(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2);
	assert_string_equal(cJSON_GetArrayItem(v, 1)->valuestring, "b");
	v = cJSON_GetObjectItemCaseSensitive(o, "allowed_gids");
	assert_true(cJSON_IsArray(v) && cJSON_GetArrayItem(v, 0)->valuedouble == 4294967294.0);
	v = cJSON_GetObjectItemCaseSensitive(o, "name");
	assert_string_equal(v->valuestring, "j");

	/* The output is itself a valid topic file that reads back the same struct. */
	printed = cJSON_PrintUnformatted(o);
	assert_non_null(printed);
	rgapsd_topic_config_defaults(&back);
	assert_int_equal(rgapsd_topic_config_parse(printed, strlen(printed), "round", &back,
						   fx->err, sizeof(fx->err)),
			 0);
	assert_memory_equal(&back, &tc, sizeof(tc));
	cJSON_free(printed);
	cJSON_Delete(o);
}

static void test_print_help(void **state)
{
	static const char *const want[] = {
		"  socket (string, at most 107 bytes)\n      default: \"/run/rgaps/rgapsd.sock\"\n",
		"  instance (", "  plugin_dir (", "  topics_dir (",
		"  log_level (error | warn | info | debug | trace)\n      default: \"info\"\n",
		"  listen (", "  peers (array of at most 16 strings, no repeats)\n",
		"  key_file (", "  keepalive_ms (integer, 10..3600000)\n      default: 2000\n",
		"  defaults (object)\n",
		"  name (string, at most 63 bytes)\n      default: the file name less \".json\"\n",
		"  pool_size (size, 4KiB..1TiB)\n      default: \"256MiB\"\n",
		"  max_message_size (size, 1B..1TiB)\n      default: \"64MiB\"\n",
		"  queue_depth (power of two, 2..65536)\n      default: 64\n",
		"  history (integer, 0..65535)\n      default: 0\n",
		"  max_subscribers (integer, 1..1024)\n      default: 64\n",
		"  max_publishers (integer, 1..256)\n      default: 16\n",
		"  max_holds (integer, 1..256)\n      default: 16\n",
		"  max_loans (integer, 1..256)\n      default: 8\n",
		"  block_timeout_ms (integer, 0..3600000)\n      default: 1000\n",
		"  overflow (block | drop_oldest)\n      default: \"block\"\n",
		"  memory (string, at most 31 bytes)\n      default: \"auto\"\n",
		"  transport (string, at most 31 bytes)\n      default: \"auto\"\n",
		"  device (integer, 0..1023)\n      default: 0\n",
		"  chunk_size (size, 4KiB..1GiB)\n      default: \"16MiB\"\n",
		"  chunking (boolean)\n      default: true\n",
		"  ring_size (size, 8KiB..64GiB)\n      default: \"64MiB\"\n",
		"  watermark (number, 0..1)\n      default: 0.25\n",
		"  stages (array of at most 8 strings, no repeats)\n      default: []\n",
		"  allowed_uids (array of at most 32 integers, no repeats)\n      default: []\n",
		"  allowed_gids (",
	};
	char *buf = NULL, *line;
	size_t len = 0;
	FILE *f;

	f = open_memstream(&buf, &len);
	assert_non_null(f);
	rgapsd_config_print_help(f);
	assert_int_equal(fclose(f), 0);
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(want); i++)
		if (!strstr(buf, want[i]))
			fail_msg("help lacks \"%s\"", want[i]);
	/* Wrapped to 80 columns. */
	for (line = buf; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] != 0))
		assert_true(strcspn(line, "\n") <= 80);
	free(buf);
}

/* ------------------------------------------------------------------------ */
/* Sizes and names                                                          */

static void test_parse_size(void **state)
{
	static const struct {
		const char *s;
		int rc;
		uint64_t v;
	} cases[] = {
		{ "0", 0, 0 },
		{ "4096", 0, 4096 },
		{ "1B", 0, 1 },
		{ "4K", 0, 4 * KiB },
		{ "4KB", 0, 4 * KiB },
		{ "4KiB", 0, 4 * KiB },
		{ "4 KiB", 0, 4 * KiB },
		{ "4   KiB", 0, 4 * KiB },
		{ "12 KB", 0, 12 * KiB }, /* binary, as documented */
		{ "4kib", 0, 4 * KiB },
		{ "256MiB", 0, 256 * MiB },
		{ "256M", 0, 256 * MiB },
		{ "1G", 0, GiB },
		{ "1GB", 0, GiB },
		{ "1.5GiB", 0, 3 * GiB / 2 },
		{ "0.5KiB", 0, 512 },
		{ "1.25 MiB", 0, 1310720 },
		{ "1.0B", 0, 1 },
		{ "2T", 0, 2 * TiB },
		{ "16777215TiB", 0, 16777215 * TiB },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "007", 0, 7 },
		{ "", -EINVAL, 0 },
		{ "MiB", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "+1", -EINVAL, 0 },
		{ " 1", -EINVAL, 0 },
		{ "1 ", -EINVAL, 0 },
		{ "1MiB ", -EINVAL, 0 },
		{ "99999999999TiB", -EINVAL, 0 },
		{ "16777216TiB", -EINVAL, 0 },
		{ "18446744073709551616", -EINVAL, 0 },
		{ "1.5B", -EINVAL, 0 },
		{ "0.3KiB", -EINVAL, 0 }, /* 307.2 bytes */
		{ "1.", -EINVAL, 0 },
		{ ".5G", -EINVAL, 0 },
		{ "1.2.3", -EINVAL, 0 },
		{ "12XB", -EINVAL, 0 },
		{ "1e6", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1GiBB", -EINVAL, 0 },
		{ "1 P", -EINVAL, 0 },
		{ "1.0000000000000000001GiB", -EINVAL, 0 },
	};
	uint64_t v;

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cases); i++) {
		v = 0xfeedfacecafebeefull;
		if (rgaps__parse_size(cases[i].s, &v) != cases[i].rc)
			fail_msg("rgaps__parse_size(\"%s\") did not return %d", cases[i].s,
				 cases[i].rc);
		if (cases[i].rc == 0 && v != cases[i].v)
			fail_msg("rgaps__parse_size(\"%s\") = %" PRIu64 ", want %" PRIu64,
				 cases[i].s, v, cases[i].v);
		if (cases[i].rc != 0) /* output written only on success */
			assert_int_equal(v, 0xfeedfacecafebeefull);
	}
	assert_int_equal(rgaps__parse_size(NULL, &v), -EINVAL);
}

static void test_format_size(void **state)
{
	static const struct {
		uint64_t v;
		const char *s;
	} cases[] = {
		{ 0, "0B" },
		{ 1, "1B" },
		{ 1000, "1000B" },
		{ 1023, "1023B" },
		{ 1024, "1KiB" },
		{ 1025, "1025B" },
		{ 4096, "4KiB" },
		{ 1536, "1536B" },
		{ 64 * MiB, "64MiB" },
		{ 1536 * MiB, "1536MiB" },
		{ GiB, "1GiB" },
		{ TiB, "1TiB" },
		{ 1024 * TiB, "1024TiB" },
		{ UINT64_MAX, "18446744073709551615B" },
	};
	char buf[32], tiny[4];
	uint64_t v;

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cases); i++) {
		rgaps__format_size(cases[i].v, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].s);
		/* exact: it parses back to the same number */
		assert_int_equal(rgaps__parse_size(buf, &v), 0);
		assert_int_equal(v, cases[i].v);
	}
	rgaps__format_size(64 * MiB, tiny, sizeof(tiny));
	assert_string_equal(tiny, "64M");
}

static void test_topic_names(void **state)
{
	static const struct {
		const char *name;
		bool ok;
	} cases[] = {
		{ "a", true },
		{ "cam0", true },
		{ "Cam_0.raw-frames", true },
		{ "0", true },
		{ "_x", true },
		{ "a.", true },
		{ "a..b", true },
		{ "012345678901234567890123456789012345678901234567890123456789012", true },
		{ "0123456789012345678901234567890123456789012345678901234567890123", false },
		{ "", false },
		{ ".hidden", false },
		{ "-x", false },
		{ "a b", false },
		{ "a/b", false },
		{ "a:b", false },
		{ "caf\xc3\xa9", false },
		{ "tab\t", false },
		{ NULL, false },
	};

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cases); i++)
		if (rgaps__topic_name_valid(cases[i].name) != cases[i].ok)
			fail_msg("rgaps__topic_name_valid(\"%s\") != %d",
				 cases[i].name ? cases[i].name : "(null)", cases[i].ok);
}

/* The files shipped in config/ must load and say what the tables say. */
static void test_shipped_examples(void **state)
{
	struct fx *fx = *state;
	struct rgapsd_config cfg, def;
	char path[512];

#ifdef RGAPS_SOURCE_ROOT
	snprintf(path, sizeof(path), "%s/config/rgapsd.json", RGAPS_SOURCE_ROOT);
#else
	snprintf(path, sizeof(path), "config/rgapsd.json");
#endif
	if (access(path, R_OK) != 0) {
		print_message("skipped: %s not found (run from the source root or define "
			      "RGAPS_SOURCE_ROOT)\n", path);
		skip();
	}
	assert_int_equal(rgapsd_config_load(path, &cfg, fx->err, sizeof(fx->err)), 0);
	rgapsd_config_defaults(&def);
	/* rgapsd.json spells out every default. */
	assert_string_equal(cfg.socket_path, def.socket_path);
	assert_int_equal(cfg.log_level, def.log_level);
	assert_int_equal(cfg.keepalive_ms, def.keepalive_ms);
	assert_int_equal(cfg.max_connections, def.max_connections);
	assert_int_equal(cfg.max_connections_per_user, def.max_connections_per_user);
	assert_int_equal(cfg.idle_timeout_ms, def.idle_timeout_ms);
	assert_int_equal(cfg.frame_timeout_ms, def.frame_timeout_ms);
	assert_int_equal(cfg.max_unsent_replies, def.max_unsent_replies);
	assert_int_equal(cfg.max_topics, def.max_topics);
	assert_int_equal(cfg.max_topics_per_user, def.max_topics_per_user);
	assert_int_equal(cfg.create_topics, def.create_topics);
	assert_string_equal(cfg.socket_mode, def.socket_mode);
	assert_string_equal(cfg.socket_group, def.socket_group);
	assert_int_equal(cfg.npeers, 0);
	assert_memory_equal(&cfg.topic_defaults, &def.topic_defaults, sizeof(def.topic_defaults));
	assert_int_equal(cfg.ntopics, 1);
	assert_string_equal(cfg.topics[0].name, "example");
	rgapsd_config_free(&cfg);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_defaults_without_file),
		T(test_default_path_is_read),
		T(test_missing_explicit_file),
		T(test_full_valid_file),
		T(test_topics_dir),
		T(test_rejects),
		T(test_reject_too_many),
		T(test_invalid_json),
		T(test_duplicate_topic),
		T(test_log_levels),
		T(test_topic_parse_api),
		T(test_validate_api),
		T(test_to_json),
		T(test_relay_key),
		T(test_gpu_keys),
		T(test_print_help),
		T(test_discovery),
		T(test_parse_size),
		T(test_format_size),
		T(test_topic_names),
		T(test_shipped_examples),
	};

	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
