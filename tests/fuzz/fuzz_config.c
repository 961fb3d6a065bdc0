/*
 * libFuzzer target for the topic configuration parser (rgapsd_topic_config_parse
 * in src/daemon/config_file.c). The input is the text of a topic file, parsed on
 * top of rgapsd_topic_config_defaults() (the daemon starts from its "defaults"
 * object, with the name taken from the file name). A refusal must be
 * -EINVAL with a message "WHAT: ..." that names the file, and must leave the
 * struct untouched. An acceptance must hold up:
 *
 *  - rgapsd_topic_config_validate() refuses it only for what the parser does
 *    not check by design, and then names that key: the rules between keys
 *    (docs/CONFIG.md, "Errors"), checked once the whole file is in, and an
 *    empty name, which a topic file may leave to its file name (the loader
 *    sets it before parsing; bare defaults hold ""). Every per-key rule
 *    passed in the parser must pass again in validate.
 *  - rgapsd_topic_config_to_json() printed with cJSON_PrintUnformatted, parsed
 *    again onto fresh defaults, is accepted, gives the same config, and prints
 *    the identical text. The one key taken out first is an empty "name": the
 *    parser refuses "" as a topic name, which is right for a file, so the
 *    round trip leaves it out and the fresh defaults supply the same "". The
 *    watermark (a double) is compared as cJSON prints it: cJSON 1.7 writes 15
 *    significant digits when they read back within DBL_EPSILON, so the double
 *    may come back one ulp off while the text is identical.
 *  - Accepted text holds no \u0000 escape (CHECK_NUL_ESCAPE): see there.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/common -Isrc/daemon -Iinclude \
 *         src/common/config.c src/daemon/config_file.c src/daemon/hostport.c \
 *         tests/fuzz/fuzz_config.c -lcjson -lm -o fuzz_config
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_file.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define WHAT "fuzz/topic.json"
#define ERRLEN 512

/*
 * cJSON turns the escape \u0000 into a NUL in its C strings, so a parser that
 * trusted it would see a key or a value cut short there and accept what
 * follows unchecked ({"memory":"host\u0000junk"} as "host"). This target
 * found that; config.c now refuses any text with the escape, and the target
 * traps if such text is ever accepted again.
 */
#ifndef CHECK_NUL_ESCAPE
#define CHECK_NUL_ESCAPE 1
#endif

/* err after a refusal: NUL-terminated, "WHAT: " and then a reason. */
static void check_err(const char *err)
{
	size_t n = strnlen(err, ERRLEN);

	if (n == ERRLEN)
		__builtin_trap();
	if (strncmp(err, WHAT ": ", strlen(WHAT ": ")) != 0 || n <= strlen(WHAT ": "))
		__builtin_trap();
}

static bool same_ids(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb)
{
	return na == nb && na <= RGAPS_CFG_MAX_IDS && !memcmp(a, b, na * sizeof(*a));
}

static bool same_config(const struct rgaps_topic_config *a, const struct rgaps_topic_config *b)
{
	double wa = a->watermark, wb = b->watermark;

	if (strcmp(a->name, b->name) || a->pool_size != b->pool_size ||
	    a->max_message_size != b->max_message_size || a->queue_depth != b->queue_depth ||
	    a->history != b->history || a->max_subscribers != b->max_subscribers ||
	    a->max_publishers != b->max_publishers || a->max_holds != b->max_holds ||
	    a->max_loans != b->max_loans || a->block_timeout_ms != b->block_timeout_ms ||
	    a->overflow != b->overflow || strcmp(a->memory, b->memory) ||
	    strcmp(a->transport, b->transport) || a->device != b->device ||
	    a->chunk_size != b->chunk_size || a->chunking != b->chunking ||
	    a->ring_size != b->ring_size)
		return false;
	if (fabs(wa - wb) > fmax(fabs(wa), fabs(wb)) * DBL_EPSILON)
		return false;
	if (a->nstages != b->nstages || a->nstages > RGAPS_CFG_MAX_STAGES)
		return false;
	for (uint32_t i = 0; i < a->nstages; i++)
		if (strcmp(a->stages[i], b->stages[i]))
			return false;
	return same_ids(a->allowed_uids, a->nallowed_uids, b->allowed_uids, b->nallowed_uids) &&
	       same_ids(a->allowed_gids, a->nallowed_gids, b->allowed_gids, b->nallowed_gids);
}

/* Whether valid JSON text s holds the escape \u0000 (after an unescaped backslash). */
static bool has_nul_escape(const uint8_t *s, size_t n)
{
	size_t backslashes = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\\') {
			backslashes++;
			continue;
		}
		if (backslashes % 2 && s[i] == 'u' && n - i > 4 && !memcmp(s + i + 1, "0000", 4))
			return true;
		backslashes = 0;
	}
	return false;
}

/* The key validate must name for tc, or NULL where it must accept. */
static const char *expected_refusal(const struct rgaps_topic_config *tc)
{
	if (!tc->name[0])
		return "name";
	if (tc->max_message_size > tc->pool_size)
		return "max_message_size";
	if (tc->history >= tc->queue_depth)
		return "history";
	if (tc->chunking && tc->chunk_size > tc->ring_size / 2)
		return "chunk_size";
	if (!tc->chunking && tc->max_message_size > tc->ring_size)
		return "max_message_size";
	return NULL;
}

static void check_validate(const struct rgaps_topic_config *tc, char *err)
{
	const char *key = expected_refusal(tc);
	char want[64];
	int rc;

	rc = rgapsd_topic_config_validate(tc, WHAT, err, ERRLEN);
	if (!key) {
		if (rc != 0)
			__builtin_trap(); /* the parser let through what validate refuses */
		return;
	}
	if (rc != -EINVAL)
		__builtin_trap();
	check_err(err);
	snprintf(want, sizeof(want), WHAT ": key '%s': ", key);
	if (strncmp(err, want, strlen(want)) != 0)
		__builtin_trap();
}

/* The config as JSON text, an empty name left out (see above). */
static char *print_config(const struct rgaps_topic_config *tc)
{
	cJSON *j = rgapsd_topic_config_to_json(tc);
	char *text;

	if (!j)
		abort();
	if (!tc->name[0])
		cJSON_DeleteItemFromObjectCaseSensitive(j, "name");
	text = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!text)
		abort();
	return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rgaps_topic_config tc, before, again;
	char *err, *text, *text2;
	int rc;

	err = malloc(ERRLEN); /* exactly ERRLEN: a write past it is caught */
	if (!err)
		abort();
	rgapsd_topic_config_defaults(&tc);
	memcpy(&before, &tc, sizeof(tc));

	/* data is not NUL-terminated: the parser must keep to size. */
	rc = rgapsd_topic_config_parse((const char *)data, size, WHAT, &tc, err, ERRLEN);
	if (rc != 0) {
		if (rc != -EINVAL)
			__builtin_trap();
		check_err(err);
		if (memcmp(&tc, &before, sizeof(tc)) != 0)
			__builtin_trap(); /* written on failure */
		free(err);
		return 0;
	}

	if (CHECK_NUL_ESCAPE && has_nul_escape(data, size))
		__builtin_trap(); /* accepted a key or value cut short at \u0000 */
	check_validate(&tc, err);

	text = print_config(&tc);
	rgapsd_topic_config_defaults(&again);
	rc = rgapsd_topic_config_parse(text, strlen(text), WHAT, &again, err, ERRLEN);
	if (rc != 0)
		__builtin_trap(); /* to_json wrote what parse refuses: err says why */
	if (!same_config(&tc, &again))
		__builtin_trap();
	text2 = print_config(&again);
	if (strcmp(text, text2) != 0)
		__builtin_trap();
	check_validate(&again, err);

	cJSON_free(text2);
	cJSON_free(text);
	free(err);
	return 0;
}
