/*
 * oracle-pub: a publisher of wrong data, to prove that the payload oracles
 * (`rgaps sub --verify`, tests/gpu/gpu-sub) catch each kind of bad message.
 * It publishes COUNT messages of the rgaps payload pattern
 * (tools/lib/pattern.h) for counters 0, 1, 2, ..., with one planted fault at
 * position AT:
 *
 *   none       nothing planted (the control run: every message is right)
 *   body       a byte in the middle of message AT flipped
 *   first      the first body byte of message AT flipped
 *   last       the last byte of message AT flipped (in the partial last word)
 *   counter    message AT's header counter changed, its body left as it was
 *   size       message AT's header size field off by 8
 *   torn       message AT's first half from AT, its second half from AT-1
 *   duplicate  message AT is message AT-1 again
 *   stale      message AT is message AT-3 again
 *   reorder    messages AT and AT+1 published in the other order
 *   skip       counter AT never published: the messages from AT on carry AT+1...
 *
 *   oracle-pub TOPIC KIND [--count N] [--at K] [--size BYTES[,BYTES...]]
 *
 * Defaults: 8 messages, AT 4, 4101 bytes (a partial last word). With a list
 * of sizes, message i has the (i mod n)-th (exact sizes on a boundary: kind
 * none, every message right, in one stream). Exit 0 when every message was
 * published.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"
#include "rgaps/rgaps.h"
#include "tool.h"

static const char *const kinds[] = { "none",  "body",	   "first", "last",    "counter", "size",
				     "torn",  "duplicate", "stale", "reorder", "skip" };

#define MAX_SIZES 64

static void usage(void)
{
	fprintf(stderr,
		"usage: oracle-pub TOPIC KIND [--count N] [--at K] [--size BYTES[,BYTES...]]\n"
		"KIND: none body first last counter size torn duplicate stale reorder skip\n");
	exit(2);
}

static void flip(uint8_t *p, uint64_t off)
{
	p[off] ^= 0x40;
}

/* The counter message i carries (before any fault that rewrites its bytes). */
static uint64_t counter_of(const char *kind, uint64_t i, uint64_t at)
{
	if (strcmp(kind, "duplicate") == 0 && i == at)
		return at - 1;
	if (strcmp(kind, "stale") == 0 && i == at)
		return at - 3;
	if (strcmp(kind, "reorder") == 0 && (i == at || i == at + 1))
		return i == at ? at + 1 : at;
	if (strcmp(kind, "skip") == 0 && i >= at)
		return i + 1;
	return i;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "at", required_argument, NULL, 'a' },
		{ "size", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t count = 8, at = 4, sizes[MAX_SIZES] = { 4101 }, nsizes = 1, size = 0, known = 0;
	const char *topic, *kind;
	rgaps_publisher_t *pub;
	uint8_t *buf, *prev;
	int o, rc = 0;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			count = strtoull(optarg, NULL, 10);
			break;
		case 'a':
			at = strtoull(optarg, NULL, 10);
			break;
		case 's':
			nsizes = 0;
			for (char *tok = strtok(optarg, ","); tok; tok = strtok(NULL, ","))
				if (nsizes == MAX_SIZES || tool_parse_size(tok, &sizes[nsizes++]))
					usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 2)
		usage();
	topic = argv[optind];
	kind = argv[optind + 1];
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		known |= strcmp(kind, kinds[k]) == 0;
	for (uint64_t k = 0; k < nsizes; k++) {
		if (sizes[k] < RGAPS_PATTERN_HDR + 9)
			usage(); /* a body to flip */
		size = sizes[k] > size ? sizes[k] : size;
	}
	/* every fault needs room around it: AT-3 before, AT+1 after */
	if (!known || !nsizes || (strcmp(kind, "none") != 0 && (at < 3 || at + 2 > count)))
		usage();
	buf = malloc(size);
	prev = malloc(size);
	if (!buf || !prev)
		return 1;
	pub = rgaps_publisher_init(topic);
	if (!pub) {
		fprintf(stderr, "oracle-pub: cannot attach to '%s': %s\n", topic,
			rgaps_strerror(errno));
		return 1;
	}
	for (uint64_t i = 0; i < count; i++) {
		int r;

		size = sizes[i % nsizes];
		rgaps_pattern_fill(buf, size, counter_of(kind, i, at));
		if (i == at) {
			uint64_t body = size - RGAPS_PATTERN_HDR;

			if (strcmp(kind, "body") == 0)
				flip(buf, RGAPS_PATTERN_HDR + body / 2);
			else if (strcmp(kind, "first") == 0)
				flip(buf, RGAPS_PATTERN_HDR);
			else if (strcmp(kind, "last") == 0)
				flip(buf, size - 1);
			else if (strcmp(kind, "counter") == 0)
				flip(buf, 3);
			else if (strcmp(kind, "size") == 0)
				buf[8] += 8;
			else if (strcmp(kind, "torn") == 0)
				memcpy(buf + size / 2, prev + size / 2, size - size / 2);
		}
		r = rgaps_publisher_push(pub, size, buf);
		if (r) {
			fprintf(stderr, "oracle-pub: message %" PRIu64 ": %s\n", i, rgaps_strerror(r));
			rc = 1;
			break;
		}
		memcpy(prev, buf, size);
	}
	if (!rc)
		printf("oracle-pub: %" PRIu64 " messages of %" PRIu64 "%s bytes, '%s' at %" PRIu64
		       "\n",
		       count, sizes[0], nsizes > 1 ? " and more" : "", kind, at);
	rgaps_publisher_destroy(pub);
	free(prev);
	free(buf);
	return rc;
}
