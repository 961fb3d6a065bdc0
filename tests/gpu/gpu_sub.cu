/*
 * gpu-sub: a subscriber that checks every byte of every message IN PLACE: a
 * kernel reads the device pointer rgaps hands out (the topic's shared GPU
 * pool, mapped into this process) and counts the words that differ from the
 * payload pattern. Nothing is copied to the host but the verdict.
 *
 *   gpu-sub TOPIC [--count N] [--timeout S] [--allow-gaps] [--hold K]
 *           [--device D] [--async] [--path local|peer|replica]
 *
 * --device D: the kernels run on GPU D, whatever GPU the topic's pools are on
 * (rgapsd serves it by peer access or a replica: --path says which is
 * expected). --async: stream order - take_async() orders the verifying kernel
 * after the publisher's copy on the GPU, release_async() follows the kernel on
 * the same stream, and the host waits only to read the verdict. Exit 3: the
 * attach was refused (ENODEV: a GPU the topic cannot serve).
 *
 * A message is right when every byte is the pattern for its origin sequence
 * number and, in its publisher's stream (rgaps_msg_info()), that number follows
 * the previous one but for the losses reported (tools/lib/pattern.h, as
 * `rgaps sub --verify`): a duplicated, stale or reordered message is a mismatch.
 *
 * Prints "received R verified V mismatched M gaps G drops D" and exits 0 when
 * R == N, M == 0 and (with --allow-gaps aside) G == 0. --hold K takes K
 * messages, verifies them, keeps holding them, prints "holding K" and waits to
 * be killed (the reclaim test).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <vector>

#include "gpu_test.cuh"
#include "pattern.h"
#include "rgaps/rgaps.h"

static volatile sig_atomic_t stop;

static void on_signal(int)
{
	stop = 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpu-sub TOPIC [--count N] [--timeout S] [--allow-gaps] "
			"[--hold K]\n"
			"               [--device D] [--async] [--path local|peer|replica]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 't' },
		{ "allow-gaps", no_argument, NULL, 'g' },
		{ "hold", required_argument, NULL, 'H' },
		{ "device", required_argument, NULL, 'd' },
		{ "async", no_argument, NULL, 'a' },
		{ "path", required_argument, NULL, 'p' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t count = 100, received = 0, verified = 0, mismatched = 0, gaps = 0;
	uint64_t hold = 0, t0, deadline;
	int allow_gaps = 0, async = 0, device = 0, ndev = 0, o, rc;
	/* one per publisher stream: its id (rgaps_msg_info_t.stream) and its place */
	std::vector<std::pair<uint64_t, struct rgaps_pattern_stream>> streams;
	const char *want_path = NULL;
	static const char *const paths[] = { "local", "peer", "replica" };
	double timeout = 60;
	const char *topic;
	rgaps_subscriber_t *sub;
	rgaps_topic_info_t info = {};
	verify_result *d_res, *h_res;
	struct sigaction sa;
	cudaStream_t s;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			count = strtoull(optarg, NULL, 10);
			break;
		case 't':
			timeout = atof(optarg);
			break;
		case 'g':
			allow_gaps = 1;
			break;
		case 'H':
			hold = strtoull(optarg, NULL, 10);
			count = hold;
			break;
		case 'd':
			device = atoi(optarg);
			break;
		case 'a':
			async = 1;
			break;
		case 'p':
			want_path = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1)
		usage();
	topic = argv[optind];
	gpu_require("gpu-sub");
	info.struct_size = sizeof(info);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a waiting take() returns -EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	CK(cudaGetDeviceCount(&ndev));
	if (device < 0 || device >= ndev) {
		printf("SKIP gpu-sub: GPU %d asked for, %d visible\n", device, ndev);
		return GPU_SKIP;
	}
	CK(cudaSetDevice(device));
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaMalloc(&d_res, sizeof(*d_res)));
	CK(cudaMallocHost(&h_res, sizeof(*h_res)));
	{
		rgaps_attach_opts_t ao = {};

		ao.struct_size = sizeof(ao);
		ao.device = device;
		sub = rgaps_subscriber_init_ex(topic, &ao);
	}
	if (!sub) {
		int e = errno;

		fprintf(stderr, "gpu-sub: cannot attach to '%s' on GPU %d: %s\n", topic, device,
			strerror(e));
		printf("refused: %s\n", strerror(e));
		return e == ENODEV ? 3 : 1;
	}
	rgaps_subscriber_info(sub, &info);
	if (info.memory != RGAPS_MEMORY_CUDA) {
		fprintf(stderr, "gpu-sub: topic '%s' is not in GPU memory\n", topic);
		return 1;
	}
	printf("attached to '%s' (pool on GPU %d, %zu bytes) on GPU %d, path %s%s\n", topic,
	       info.device, info.pool_size, info.handle_device,
	       info.gpu_path >= 0 && info.gpu_path <= 2 ? paths[info.gpu_path] : "?",
	       async ? ", stream-ordered" : "");
	fflush(stdout);
	if (want_path && (info.gpu_path < 0 || info.gpu_path > 2 ||
			  strcmp(paths[info.gpu_path], want_path) != 0)) {
		fprintf(stderr, "gpu-sub: path is %s, expected %s\n",
			info.gpu_path >= 0 && info.gpu_path <= 2 ? paths[info.gpu_path] : "?",
			want_path);
		return 1;
	}

	t0 = gpu_now_ns();
	deadline = t0 + (uint64_t)(timeout * 1e9);
	while (received < count && !stop) {
		uint64_t now = gpu_now_ns();
		rgaps_msg_t m;
		int r;

		if (now >= deadline) {
			fprintf(stderr, "gpu-sub: timed out after %llu of %llu messages\n",
				(unsigned long long)received, (unsigned long long)count);
			break;
		}
		r = async ? rgaps_subscriber_take_async(sub, &m, 200, s) :
			    rgaps_subscriber_take(sub, &m, 200);
		if (r == -ETIMEDOUT || r == -EINTR || r == -EAGAIN)
			continue;
		if (r) {
			fprintf(stderr, "gpu-sub: take: %s\n", rgaps_strerror(r));
			break;
		}
		rgaps_msg_info_t mi = {};
		struct rgaps_pattern_stream *place = NULL;
		const char *where, *counter = NULL;

		mi.struct_size = sizeof(mi);
		r = rgaps_msg_info(sub, &m, &mi); /* while it is held: before any release */
		if (r) {
			fprintf(stderr, "gpu-sub: message seq %llu: rgaps_msg_info: %s\n",
				(unsigned long long)m.seq, rgaps_strerror(r));
			break;
		}
		for (auto &p : streams)
			if (p.first == mi.stream)
				place = &p.second;
		if (!place) {
			streams.push_back({ mi.stream, {} });
			place = &streams.back().second;
		}
		if (m.flags & RGAPS_MSG_GAP) { /* no payload: news of losses only */
			gaps += m.gap;
			rgaps_pattern_lost(place, m.gap);
			continue;
		}
		if (received == 0) {
			cudaPointerAttributes a;

			/* Host memory here would mean the topic is not really on the GPU. */
			CK(cudaPointerGetAttributes(&a, m.data));
			if (a.type == cudaMemoryTypeHost) {
				fprintf(stderr, "gpu-sub: message is in host memory\n");
				return 1;
			}
			printf("first message at %p: CUDA memory type %d, device %d\n", m.data,
			       (int)a.type, a.device);
			fflush(stdout);
		}
		received++;
		gaps += m.gap;
		where = rgaps_pattern_place(place, mi.origin_seq, m.gap);
		if (m.size < PATTERN_HDR) {
			h_res->bad = 1;
			h_res->first_bad = 0;
			h_res->counter = 0;
		} else if (async) {
			/* Verify on s, release after the kernel on s, and only then wait for the verdict. */
			pattern_verify_launch(m.data, m.size, d_res, h_res, s);
			if (!hold) {
				r = rgaps_subscriber_release_async(sub, &m, s);
				if (r) {
					fprintf(stderr, "gpu-sub: release_async: %s\n", rgaps_strerror(r));
					mismatched++;
				}
			}
			CK(cudaStreamSynchronize(s));
		} else {
			pattern_verify(m.data, m.size, d_res, h_res, s);
		}
		if (!h_res->bad)
			counter = rgaps_pattern_counter_error(h_res->counter, mi.origin_seq);
		if (where || h_res->bad || counter) {
			mismatched++;
			if (mismatched <= 20 && where)
				fprintf(stderr,
					"gpu-sub: seq %llu (stream %llu, origin seq %llu, %zu bytes): %s\n",
					(unsigned long long)m.seq, (unsigned long long)mi.stream,
					(unsigned long long)mi.origin_seq, m.size, where);
			if (mismatched <= 20 && h_res->bad)
				fprintf(stderr,
					"gpu-sub: seq %llu (origin seq %llu, %zu bytes, counter %llu): "
					"%llu bad words, first at byte %llu\n",
					(unsigned long long)m.seq, (unsigned long long)mi.origin_seq,
					m.size, h_res->counter, h_res->bad, h_res->first_bad);
			else if (mismatched <= 20 && counter)
				fprintf(stderr,
					"gpu-sub: seq %llu (origin seq %llu, %zu bytes): counter %llu: %s\n",
					(unsigned long long)m.seq, (unsigned long long)mi.origin_seq,
					m.size, h_res->counter, counter);
		} else {
			verified++;
		}
		if (!hold && !async)
			rgaps_subscriber_release(sub, &m);
	}
	rgaps_subscriber_info(sub, &info);
	printf("received %llu verified %llu mismatched %llu gaps %llu drops %llu streams %zu\n",
	       (unsigned long long)received, (unsigned long long)verified,
	       (unsigned long long)mismatched, (unsigned long long)gaps,
	       (unsigned long long)info.drops, streams.size());
	fflush(stdout);
	rc = received == count && mismatched == 0 && (allow_gaps || gaps == 0) ? 0 : 1;
	if (hold && rc == 0) {
		printf("holding %llu\n", (unsigned long long)hold);
		fflush(stdout);
		while (!stop && gpu_now_ns() < deadline)
			usleep(50000);
	}
	rgaps_subscriber_destroy(sub);
	CK(cudaFreeHost(h_res));
	CK(cudaFree(d_res));
	CK(cudaStreamDestroy(s));
	return rc;
}
