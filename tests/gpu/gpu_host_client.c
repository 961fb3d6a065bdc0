/*
 * gpu-host-client: the multi-GPU and stream-order API of librgaps on the host
 * memory backend, whose emulated devices (RGAPS_HOST_DEVICES, docs/GPU.md,
 * "Testing without a GPU") let rgapsd's choices run on any machine. Messages
 * are the rgaps payload pattern, checked byte for byte on the CPU.
 *
 *   gpu-host-client pub TOPIC N SIZE [--device D] [--async] [--loan] [--wait-subs K]
 *                   [--linger S] [--retry]
 *   gpu-host-client sub TOPIC N [--device D] [--async] [--path local|peer|replica]
 *                   [--hold K] [--timeout S] [--expect-gaps G] [--accounted]
 *   gpu-host-client attach pub|sub TOPIC --device D   (exit 0 attached, 3 refused: errno printed)
 *   gpu-host-client local TOPIC N [--device D]  publisher and subscriber in this one process:
 *                   N messages by push_async, taken with take_async and take in turn
 *
 * sub prints "received R verified V mismatched M gaps G" and exits 0 when
 * R == N, M == 0, G == 0 (or G == --expect-gaps, waited for) and the handle's GPU
 * path is the one asked for; with --accounted (drop_oldest: losses allowed but
 * reported) when F + R + G == N and M == 0, F being the index of the first
 * message received (one retired before a subscriber's first take is not its
 * loss: live delivery starts there). pub --linger S: stay attached S seconds after the
 * last publish (to be killed with copies in flight); --retry: publish a message
 * again when the wait for room timed out ("block" holding the publisher back),
 * up to 100 times.
 * --async: push_async / commit_async (pub), take_async + release_async (sub),
 * on the default stream (NULL). --hold K: take K, print "holding K", sleep.
 *
 * RGAPS_FAKE_CUDA_DRIVER=PATH: load that stand-in for the CUDA driver first
 * (tests/gpu/fakedrv), so that librgaps learns which emulated GPUs this
 * process sees (CUDA_VISIBLE_DEVICES) and their PCI addresses, as it would
 * from the real driver.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "pattern.h"
#include "rgaps/rgaps.h"

static const char *const path_names[] = { "local", "peer", "replica" };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int subscribers(const char *topic)
{
	char *text = NULL;
	cJSON *reply, *t;
	int n = 0;

	if (rgaps_query("{\"type\":\"topics\"}", &text) != 0 || !text) {
		free(text);
		return 0;
	}
	reply = cJSON_Parse(text);
	free(text);
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(reply, "topics"))
	{
		cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
		cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "subscribers");

		if (cJSON_IsString(name) && strcmp(name->valuestring, topic) == 0 &&
		    cJSON_IsNumber(v))
			n = (int)v->valuedouble;
	}
	cJSON_Delete(reply);
	return n;
}

static int do_pub(const char *topic, uint64_t n, uint64_t size, const rgaps_attach_opts_t *o,
		  int async, int loan, int wait_subs, double linger, int retry)
{
	rgaps_publisher_t *pub = rgaps_publisher_init_ex(topic, o);
	uint8_t *buf = malloc(size);
	uint64_t base = (uint64_t)getpid() << 32, t0 = now_ns();
	int failures = 0;

	if (!pub || !buf) {
		fprintf(stderr, "pub: cannot attach to '%s': %s\n", topic, strerror(errno));
		return 1;
	}
	while (wait_subs && subscribers(topic) < wait_subs) {
		if (now_ns() - t0 > 30000000000ull) {
			fprintf(stderr, "pub: fewer than %d subscribers after 30 s\n", wait_subs);
			return 1;
		}
		usleep(20000);
	}
	for (uint64_t i = 0, tries = 0; i < n; i++) {
		int r;

		if (loan) {
			rgaps_loan_t l;

			r = rgaps_publisher_loan(pub, size, -1, &l);
			if (!r) {
				rgaps_pattern_fill(l.data, size, base + i);
				r = async ? rgaps_publisher_commit_async(pub, &l, size, NULL) :
					    rgaps_publisher_commit(pub, &l, size);
			}
		} else {
			rgaps_pattern_fill(buf, size, base + i);
			r = async ? rgaps_publisher_push_async(pub, size, buf, NULL) :
				    rgaps_publisher_push(pub, size, buf);
		}
		if (r == -ETIMEDOUT && retry && ++tries < 100) {
			i--;
			continue;
		}
		tries = 0;
		if (r) {
			fprintf(stderr, "pub: message %llu: %s\n", (unsigned long long)i,
				rgaps_strerror(r));
			failures++;
		}
	}
	printf("published %llu failures %d\n", (unsigned long long)n, failures);
	fflush(stdout);
	if (linger > 0)
		usleep((useconds_t)(linger * 1e6));
	rgaps_publisher_destroy(pub);
	free(buf);
	return failures ? 1 : 0;
}

static int do_sub(const char *topic, uint64_t n, const rgaps_attach_opts_t *o, int async,
		  const char *want_path, uint64_t hold, double timeout, uint64_t want_gaps,
		  int accounted)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init_ex(topic, o);
	rgaps_topic_info_t info = { .struct_size = sizeof(info) };
	uint64_t received = 0, verified = 0, mismatched = 0, gaps = 0, first = 0;
	uint64_t deadline = now_ns() + (uint64_t)(timeout * 1e9);
	int rc;

	if (!sub) {
		fprintf(stderr, "sub: cannot attach to '%s': %s\n", topic, strerror(errno));
		return 1;
	}
	rgaps_subscriber_info(sub, &info);
	printf("attached: GPU %d, path %s\n", info.handle_device,
	       info.gpu_path >= 0 && info.gpu_path <= 2 ? path_names[info.gpu_path] : "?");
	fflush(stdout);
	if (want_path && (info.gpu_path < 0 || info.gpu_path > 2 ||
			  strcmp(path_names[info.gpu_path], want_path) != 0)) {
		fprintf(stderr, "sub: path is not %s\n", want_path);
		rgaps_subscriber_destroy(sub);
		return 1;
	}
	while ((accounted ? first + received + gaps < n : received < n || gaps < want_gaps) &&
	       now_ns() < deadline) {
		rgaps_msg_t m;
		uint64_t ctr = 0;
		int r = async ? rgaps_subscriber_take_async(sub, &m, 200, NULL) :
				rgaps_subscriber_take(sub, &m, 200);

		if (r == -ETIMEDOUT || r == -EAGAIN || r == -EINTR)
			continue;
		if (r) {
			fprintf(stderr, "sub: take: %s\n", rgaps_strerror(r));
			break;
		}
		gaps += m.gap;
		if (m.flags & RGAPS_MSG_GAP)
			continue;
		if (rgaps_pattern_check(m.data, m.size, &ctr) < 0)
			verified++;
		else
			mismatched++;
		if (!received++)
			first = (ctr & 0xffffffffu) -
				gaps; /* the publisher's counter: pid << 32 | i */
		if (hold)
			continue;
		r = async ? rgaps_subscriber_release_async(sub, &m, NULL) :
			    rgaps_subscriber_release(sub, &m);
		if (r) {
			fprintf(stderr, "sub: release: %s\n", rgaps_strerror(r));
			mismatched++;
		}
	}
	printf("received %llu verified %llu mismatched %llu gaps %llu",
	       (unsigned long long)received, (unsigned long long)verified,
	       (unsigned long long)mismatched, (unsigned long long)gaps);
	if (accounted)
		printf(" (before the first: %llu)", (unsigned long long)first);
	printf("\n");
	fflush(stdout);
	if (accounted)
		rc = first + received + gaps == n && !mismatched ? 0 : 1;
	else if (hold) /* it holds what it took: losses before are not its point */
		rc = received == n && !mismatched ? 0 : 1;
	else
		rc = received == n && !mismatched && gaps == want_gaps ? 0 : 1;
	if (hold && !rc) {
		printf("holding %llu\n", (unsigned long long)hold);
		fflush(stdout);
		while (now_ns() < deadline)
			usleep(50000);
	}
	rgaps_subscriber_destroy(sub);
	return rc;
}

/* A publisher and a subscriber of one process: the subscriber borrows the publisher's fences. */
static int do_local(const char *topic, uint64_t n, const rgaps_attach_opts_t *o)
{
	rgaps_subscriber_t *sub = rgaps_subscriber_init_ex(topic, o);
	rgaps_publisher_t *pub = rgaps_publisher_init_ex(topic, o);
	uint8_t buf[4096];
	uint64_t ok = 0;

	if (!sub || !pub) {
		fprintf(stderr, "local: cannot attach: %s\n", strerror(errno));
		return 1;
	}
	for (uint64_t i = 0; i < n; i++) {
		rgaps_msg_t m;
		uint64_t ctr;
		int r;

		rgaps_pattern_fill(buf, sizeof(buf), i);
		r = rgaps_publisher_push_async(pub, sizeof(buf), buf, NULL);
		if (r) {
			fprintf(stderr, "local: push_async: %s\n", rgaps_strerror(r));
			break;
		}
		r = i % 2 ? rgaps_subscriber_take_async(sub, &m, 5000, NULL) :
			    rgaps_subscriber_take(sub, &m, 5000);
		if (r) {
			fprintf(stderr, "local: take: %s\n", rgaps_strerror(r));
			break;
		}
		ok += rgaps_pattern_check(m.data, m.size, &ctr) < 0 && ctr == i;
		rgaps_subscriber_release_async(sub, &m, NULL);
	}
	printf("local: %llu of %llu verified\n", (unsigned long long)ok, (unsigned long long)n);
	rgaps_publisher_destroy(pub);
	rgaps_subscriber_destroy(sub);
	return ok == n ? 0 : 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpu-host-client pub TOPIC N SIZE [--device D] [--async] [--loan] "
			"[--wait-subs K]\n"
			"       gpu-host-client sub TOPIC N [--device D] [--async] [--path P] "
			"[--hold K] [--timeout S]\n"
			"       gpu-host-client attach pub|sub TOPIC --device D\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "async", no_argument, NULL, 'a' },
		{ "loan", no_argument, NULL, 'l' },
		{ "wait-subs", required_argument, NULL, 'w' },
		{ "path", required_argument, NULL, 'p' },
		{ "hold", required_argument, NULL, 'H' },
		{ "timeout", required_argument, NULL, 't' },
		{ "linger", required_argument, NULL, 'L' },
		{ "expect-gaps", required_argument, NULL, 'G' },
		{ "retry", no_argument, NULL, 'R' },
		{ "accounted", no_argument, NULL, 'A' },
		{ NULL, 0, NULL, 0 },
	};
	rgaps_attach_opts_t o = { .struct_size = sizeof(o), .device = -1 };
	const char *path = NULL;
	int async = 0, loan = 0, wait_subs = 0, retry = 0, accounted = 0, c;
	uint64_t hold = 0, want_gaps = 0;
	double timeout = 60, linger = 0;
	const char *fake = getenv("RGAPS_FAKE_CUDA_DRIVER");

	/* Global and kept: librgaps finds it by its soname, as a process's own driver. */
	if (fake && *fake && !dlopen(fake, RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "cannot load %s: %s\n", fake, dlerror());
		return 2;
	}
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o.device = atoi(optarg);
			break;
		case 'a':
			async = 1;
			break;
		case 'l':
			loan = 1;
			break;
		case 'w':
			wait_subs = atoi(optarg);
			break;
		case 'p':
			path = optarg;
			break;
		case 'H':
			hold = strtoull(optarg, NULL, 10);
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'L':
			linger = atof(optarg);
			break;
		case 'G':
			want_gaps = strtoull(optarg, NULL, 10);
			break;
		case 'R':
			retry = 1;
			break;
		case 'A':
			accounted = 1;
			break;
		default:
			usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc == 4 && strcmp(argv[0], "pub") == 0) {
		uint64_t size;

		if (rgaps__parse_size(argv[3], &size) || size < RGAPS_PATTERN_HDR)
			usage();
		return do_pub(argv[1], strtoull(argv[2], NULL, 10), size, &o, async, loan,
			      wait_subs, linger, retry);
	}
	if (argc == 3 && strcmp(argv[0], "sub") == 0)
		return do_sub(argv[1], hold ? hold : strtoull(argv[2], NULL, 10), &o, async, path,
			      hold, timeout, want_gaps, accounted);
	if (argc == 3 && strcmp(argv[0], "local") == 0)
		return do_local(argv[1], strtoull(argv[2], NULL, 10), &o);
	if (argc == 3 && strcmp(argv[0], "attach") == 0) {
		int sub = strcmp(argv[1], "sub") == 0;
		void *h = sub ? (void *)rgaps_subscriber_init_ex(argv[2], &o) :
				(void *)rgaps_publisher_init_ex(argv[2], &o);

		if (!h) {
			printf("refused: %s\n", strerror(errno));
			return 3;
		}
		printf("attached\n");
		if (sub)
			rgaps_subscriber_destroy(h);
		else
			rgaps_publisher_destroy(h);
		return 0;
	}
	usage();
	return 2;
}
