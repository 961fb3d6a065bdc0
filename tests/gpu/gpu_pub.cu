/*
 * gpu-pub: a publisher whose messages are made on the GPU. Each message is
 * written into a device buffer by a kernel (the rgaps payload pattern) and
 * published with rgaps_publisher_push() from that DEVICE pointer (one
 * device-to-device copy into the topic's GPU pool), or with --loan written by
 * the kernel straight into a loaned block of the pool (zero copies).
 * --async: stream order - the kernel is queued and rgaps_publisher_push_async()
 * (or commit_async() of the loan) follows it on the same stream with no host
 * synchronisation at all, for every message; --device D runs on GPU D.
 *
 *   gpu-pub TOPIC [--count N] [--size BYTES[-MAXBYTES]] [--loan] [--async]
 *           [--device D] [--wait-subscribers N] [--timeout S]
 *   gpu-pub --probe      exit 0 if a GPU is usable, else 77 and why
 *   gpu-pub --gpus       print how many GPUs are visible
 *   gpu-pub --selftest   the kernels against the C reference of the pattern
 */
#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "gpu_test.cuh"
#include "rgaps/rgaps.h"

static int selftest(void)
{
	/* Odd sizes on purpose: header only, a partial last word, large. */
	static const uint64_t sizes[] = { 16, 17, 23, 24, 4096 + 5, (1u << 20) + 3, 64u << 20 };
	verify_result *d_res, h_res;
	int fails = 0;
	uint8_t *d;

	CK(cudaMalloc(&d, 64u << 20));
	CK(cudaMalloc(&d_res, sizeof(*d_res)));
	for (uint64_t size : sizes) {
		std::vector<uint8_t> h(size);
		uint64_t counter = 0x1234567800000000ull + size, got = 0;
		int64_t bad;

		pattern_fill(d, size, counter, 0);
		CK(cudaMemcpy(h.data(), d, size, cudaMemcpyDeviceToHost));
		bad = gpu_ref_pattern_check(h.data(), size, &got);
		if (bad != -1 || got != counter) {
			printf("FAIL fill %llu bytes: C reference finds byte %lld bad\n",
			       (unsigned long long)size, (long long)bad);
			fails++;
		}
		pattern_verify(d, size, d_res, &h_res, 0);
		if (h_res.bad) {
			printf("FAIL verify %llu bytes: %llu bad words on a good buffer\n",
			       (unsigned long long)size, h_res.bad);
			fails++;
		}
		/* The verifier must see one flipped byte anywhere, the last one too. */
		for (uint64_t off : { (uint64_t)0, (uint64_t)9, size / 2, size - 1 }) {
			uint8_t b;

			CK(cudaMemcpy(&b, d + off, 1, cudaMemcpyDeviceToHost));
			b ^= 0x40;
			CK(cudaMemcpy(d + off, &b, 1, cudaMemcpyHostToDevice));
			pattern_verify(d, size, d_res, &h_res, 0);
			/*
			 * A flipped counter byte makes every body word wrong (so the first
			 * bad one is at 16); a header alone carries nothing to check it by.
			 */
			if (off < 8 && size == PATTERN_HDR)
				goto restore;
			if (h_res.bad == 0 ||
			    (off >= 8 && (h_res.first_bad > off || off - h_res.first_bad > 7))) {
				printf("FAIL verify %llu bytes: flipped byte %llu not found "
				       "(bad %llu first %llu)\n",
				       (unsigned long long)size, (unsigned long long)off, h_res.bad,
				       h_res.first_bad);
				fails++;
			}
restore:
			b ^= 0x40;
			CK(cudaMemcpy(d + off, &b, 1, cudaMemcpyHostToDevice));
		}
	}
	for (uint64_t k = 0; k < 1000; k++)
		if (pattern_word(k * 77, k) != gpu_ref_pattern_word(k * 77, k))
			fails++;
	CK(cudaFree(d_res));
	CK(cudaFree(d));
	printf("%s: pattern kernels %s the C reference\n", fails ? "FAIL" : "ok",
	       fails ? "disagree with" : "match");
	return fails ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpu-pub TOPIC [--count N] [--size BYTES[-MAXBYTES]] [--loan]\n"
			"               [--async] [--device D] [--wait-subscribers N] [--timeout S]\n"
			"       gpu-pub --probe | --selftest\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "size", required_argument, NULL, 's' },
		{ "loan", no_argument, NULL, 'l' },
		{ "async", no_argument, NULL, 'a' },
		{ "device", required_argument, NULL, 'd' },
		{ "wait-subscribers", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "probe", no_argument, NULL, 'p' },
		{ "gpus", no_argument, NULL, 'G' },
		{ "selftest", no_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t count = 100, smin = 1 << 20, smax = 1 << 20, bytes = 0, failures = 0;
	int loan = 0, want_subs = 0, async = 0, device = 0, ndev = 0, o;
	double timeout = 30;
	const char *topic;
	rgaps_publisher_t *pub;
	rgaps_topic_info_t info = {};
	cudaStream_t s;
	uint8_t *dbuf;
	uint64_t t0, t1, base;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *dash;

		switch (o) {
		case 'n':
			count = strtoull(optarg, NULL, 10);
			break;
		case 's':
			dash = strchr(optarg, '-');
			if (dash)
				*dash = 0;
			if (gpu_parse_size(optarg, &smin) ||
			    (dash && gpu_parse_size(dash + 1, &smax)))
				usage();
			if (!dash)
				smax = smin;
			break;
		case 'l':
			loan = 1;
			break;
		case 'a':
			async = 1;
			break;
		case 'd':
			device = atoi(optarg);
			break;
		case 'w':
			want_subs = atoi(optarg);
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'G': { /* how many GPUs (1 without any: scripts then skip what needs two) */
			int n = 0;

			if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1)
				n = 1;
			printf("%d\n", n);
			return 0;
		}
		case 'p':
			gpu_require("gpu-pub");
			printf("GPU usable\n");
			return 0;
		case 'S':
			gpu_require("gpu-pub --selftest");
			return selftest();
		default:
			usage();
		}
	}
	if (optind != argc - 1 || smin < PATTERN_HDR || smax < smin)
		usage();
	topic = argv[optind];
	gpu_require("gpu-pub");
	info.struct_size = sizeof(info);

	CK(cudaGetDeviceCount(&ndev));
	if (device < 0 || device >= ndev) {
		printf("SKIP gpu-pub: GPU %d asked for, %d visible\n", device, ndev);
		return GPU_SKIP;
	}
	CK(cudaSetDevice(device));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&dbuf, smax));
	{
		rgaps_attach_opts_t ao = {};

		ao.struct_size = sizeof(ao);
		ao.device = device;
		pub = rgaps_publisher_init_ex(topic, &ao);
	}
	if (!pub) {
		fprintf(stderr, "gpu-pub: cannot attach to '%s' on GPU %d: %s\n", topic, device,
			strerror(errno));
		return errno == ENODEV ? 3 : 1;
	}
	rgaps_publisher_info(pub, &info);
	printf("attached to '%s' on GPU %d (pool on GPU %d), %s\n", topic, info.handle_device,
	       info.device, async ? "stream-ordered (no host sync)" : "synchronous");
	fflush(stdout);
	if (info.memory != RGAPS_MEMORY_CUDA) {
		fprintf(stderr, "gpu-pub: topic '%s' is not in GPU memory\n", topic);
		return 1;
	}
	t0 = gpu_now_ns();
	while (want_subs && gpu_topic_subscribers(topic) < want_subs) {
		if ((gpu_now_ns() - t0) / 1e9 > timeout) {
			fprintf(stderr, "gpu-pub: fewer than %d subscribers on '%s' after %.0f s\n",
				want_subs, topic, timeout);
			return 1;
		}
		usleep(20000);
	}

	/* Message i carries counter i, its origin sequence number (gpu-sub checks it). */
	base = 0;
	t0 = gpu_now_ns();
	for (uint64_t i = 0; i < count; i++) {
		/* Both ends of the range first, then a spread between them. */
		uint64_t size = i == 0 ? smax : i == 1 ? smin :
			smin + (pattern_word(base, i) % (smax - smin + 1));
		int r;

		if (loan) {
			rgaps_loan_t l;

			r = rgaps_publisher_loan(pub, size, -1, &l);
			if (r == 0) {
				pattern_fill(l.data, size, base + i, s);
				if (async) {
					r = rgaps_publisher_commit_async(pub, &l, size, s);
				} else {
					CK(cudaStreamSynchronize(s));
					r = rgaps_publisher_commit(pub, &l, size);
				}
			}
		} else if (async) {
			/* The next fill of dbuf is queued after this copy on s: no overwrite. */
			pattern_fill(dbuf, size, base + i, s);
			r = rgaps_publisher_push_async(pub, size, dbuf, s);
		} else {
			pattern_fill(dbuf, size, base + i, s);
			CK(cudaStreamSynchronize(s));
			r = rgaps_publisher_push(pub, size, dbuf);
		}
		if (r) {
			failures++;
			fprintf(stderr, "gpu-pub: message %llu (%llu bytes): %s\n",
				(unsigned long long)i, (unsigned long long)size, rgaps_strerror(r));
			if (r == -ENOTCONN)
				break;
			continue;
		}
		bytes += size;
	}
	CK(cudaStreamSynchronize(s)); /* the last copies, and any error of the stream */
	t1 = gpu_now_ns();
	printf("published %llu messages (%llu bytes) in %.3f s: %.1f GiB/s (%s%s); failures %llu\n",
	       (unsigned long long)(count - failures), (unsigned long long)bytes, (t1 - t0) / 1e9,
	       bytes / ((t1 - t0) / 1e9) / (1u << 30), loan ? "loan" : "push",
	       async ? ", stream-ordered" : "", (unsigned long long)failures);
	rgaps_publisher_destroy(pub);
	CK(cudaFree(dbuf));
	CK(cudaStreamDestroy(s));
	return failures ? 1 : 0;
}
