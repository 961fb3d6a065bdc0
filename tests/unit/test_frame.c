/*
 * Unit tests of the control-protocol frame codec (src/common/frame.c): the
 * header encoding, and the reader fed whole frames, single bytes, several
 * frames at once, frames at and over the size limit, and bad headers, through
 * both the copy-in (feed) and the zero-copy (space/commit) interfaces. The
 * fuzz target tests/fuzz/fuzz_frame.c covers arbitrary splits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "util.h"

/* A frame of len payload bytes, payload[i] = seed + i, in a malloc'd buffer of 4 + len bytes. */
static uint8_t *frame_new(uint32_t len, uint8_t seed)
{
	uint8_t *f = malloc(RGAPS_FRAME_HDR + (size_t)len);

	assert_non_null(f);
	rgaps__frame_header(f, len);
	for (uint32_t i = 0; i < len; i++)
		f[RGAPS_FRAME_HDR + i] = (uint8_t)(seed + i);
	return f;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static size_t space_of(struct rgaps_frame_reader *r)
{
	uint8_t *buf;
	size_t len;

	rgaps__frame_reader_space(r, &buf, &len);
	assert_ptr_equal(buf, r->buf + r->len);
	return len;
}

static void expect_frame(struct rgaps_frame_reader *r, const uint8_t *frame, uint32_t len)
{
	const uint8_t *payload = NULL;
	size_t n = 0;

	assert_int_equal(rgaps__frame_reader_next(r, &payload, &n), 1);
	assert_int_equal(n, len);
	assert_memory_equal(payload, frame + RGAPS_FRAME_HDR, len);
}

static void expect_nothing(struct rgaps_frame_reader *r)
{
	const uint8_t *payload = (const uint8_t *)"untouched";
	size_t n = 12345;

	assert_int_equal(rgaps__frame_reader_next(r, &payload, &n), 0);
	/* Output arguments are written only on success. */
	assert_string_equal((const char *)payload, "untouched");
	assert_int_equal(n, 12345);
}

static void test_header_encode(void **state)
{
	static const struct {
		uint32_t len;
		uint8_t bytes[4];
	} cases[] = {
		{ 0, { 0, 0, 0, 0 } },
		{ 1, { 1, 0, 0, 0 } },
		{ 0x1234, { 0x34, 0x12, 0, 0 } },
		{ 0xfedc, { 0xdc, 0xfe, 0, 0 } },
		{ RGAPS_FRAME_MAX, { 0, 0, 1, 0 } },
	};

	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(cases); i++) {
		uint8_t hdr[RGAPS_FRAME_HDR] = { 0xaa, 0xaa, 0xaa, 0xaa };

		rgaps__frame_header(hdr, cases[i].len);
		assert_memory_equal(hdr, cases[i].bytes, RGAPS_FRAME_HDR);
	}
}

static void test_header_over_max_aborts(void **state)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		uint8_t hdr[RGAPS_FRAME_HDR];
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		rgaps__frame_header(hdr, RGAPS_FRAME_MAX + 1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
}

static void test_init_state(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));

	assert_non_null(r);
	memset(r, 0x5a, sizeof(*r));
	rgaps__frame_reader_init(r);
	assert_int_equal(r->len, 0);
	assert_int_equal(space_of(r), RGAPS_FRAME_HDR);
	expect_nothing(r);
	free(r);
}

static void test_whole_frame(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t *f = frame_new(17, 3);

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, f, RGAPS_FRAME_HDR + 17),
			 RGAPS_FRAME_HDR + 17);
	assert_int_equal(space_of(r), 0); /* complete: nothing more until next() */
	expect_frame(r, f, 17);
	expect_nothing(r);
	assert_int_equal(space_of(r), RGAPS_FRAME_HDR);

	/* The reader is reusable for the next frame. */
	assert_int_equal(rgaps__frame_reader_feed(r, f, RGAPS_FRAME_HDR + 17),
			 RGAPS_FRAME_HDR + 17);
	expect_frame(r, f, 17);
	free(f);
	free(r);
}

static void test_byte_by_byte(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	const uint32_t len = 300;
	uint8_t *f = frame_new(len, 7);

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < RGAPS_FRAME_HDR + len; i++) {
			size_t want = i < RGAPS_FRAME_HDR ? RGAPS_FRAME_HDR - i
							  : RGAPS_FRAME_HDR + len - i;

			assert_int_equal(space_of(r), want);
			expect_nothing(r);
			assert_int_equal(rgaps__frame_reader_feed(r, f + i, 1), 1);
		}
		expect_frame(r, f, len);
		expect_nothing(r);
	}
	free(f);
	free(r);
}

static void test_space_commit(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	const uint32_t len = 1000;
	uint8_t *f = frame_new(len, 11);
	size_t off = 0, n;
	uint8_t *buf;

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	/* What a socket reader does: receive at most the offered space, in short pieces. */
	while (off < RGAPS_FRAME_HDR + len) {
		rgaps__frame_reader_space(r, &buf, &n);
		assert_true(n > 0);
		n = RGAPS_MIN(n, (size_t)3 + off % 250);
		memcpy(buf, f + off, n);
		rgaps__frame_reader_commit(r, n);
		off += n;
		if (off < RGAPS_FRAME_HDR + len)
			expect_nothing(r);
	}
	expect_frame(r, f, len);
	free(f);
	free(r);
}

static void test_two_frames_one_feed(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t *a = frame_new(5, 1), *b = frame_new(9, 100);
	uint8_t both[RGAPS_FRAME_HDR * 2 + 5 + 9];
	size_t taken, total = 0;

	assert_non_null(r);
	memcpy(both, a, RGAPS_FRAME_HDR + 5);
	memcpy(both + RGAPS_FRAME_HDR + 5, b, RGAPS_FRAME_HDR + 9);
	rgaps__frame_reader_init(r);

	/* The reader takes one frame at a time; the caller feeds the rest after next(). */
	taken = rgaps__frame_reader_feed(r, both, sizeof(both));
	assert_int_equal(taken, RGAPS_FRAME_HDR + 5);
	total += taken;
	assert_int_equal(rgaps__frame_reader_feed(r, both + total, sizeof(both) - total), 0);
	expect_frame(r, a, 5);

	taken = rgaps__frame_reader_feed(r, both + total, sizeof(both) - total);
	assert_int_equal(taken, RGAPS_FRAME_HDR + 9);
	total += taken;
	assert_int_equal(total, sizeof(both));
	expect_frame(r, b, 9);
	expect_nothing(r);
	free(a);
	free(b);
	free(r);
}

static void test_max_size_frame(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t *f = frame_new(RGAPS_FRAME_MAX, 42);

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, f, RGAPS_FRAME_HDR), RGAPS_FRAME_HDR);
	assert_int_equal(space_of(r), RGAPS_FRAME_MAX);
	assert_int_equal(rgaps__frame_reader_feed(r, f + RGAPS_FRAME_HDR, RGAPS_FRAME_MAX),
			 RGAPS_FRAME_MAX);
	assert_int_equal(r->len, sizeof(r->buf));
	expect_frame(r, f, RGAPS_FRAME_MAX);
	free(f);
	free(r);
}

static void expect_error_sticks(struct rgaps_frame_reader *r, int err)
{
	const uint8_t junk[64] = { 1, 0, 0, 0, 'x' };
	const uint8_t *payload = NULL;
	size_t n = 0;

	for (int i = 0; i < 3; i++) {
		assert_int_equal(rgaps__frame_reader_next(r, &payload, &n), err);
		assert_null(payload);
		assert_int_equal(n, 0);
		assert_int_equal(space_of(r), 0);
		assert_int_equal(rgaps__frame_reader_feed(r, junk, sizeof(junk)), 0);
	}
}

static void test_oversize(void **state)
{
	static const uint32_t lens[] = { RGAPS_FRAME_MAX + 1, 0x00ffffff, 0x7fffffff, 0xffffffff };
	struct rgaps_frame_reader *r = malloc(sizeof(*r));

	assert_non_null(r);
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(lens); i++) {
		uint8_t hdr[RGAPS_FRAME_HDR + 8] = { 0 };

		put_le32(hdr, lens[i]);
		rgaps__frame_reader_init(r);
		/* Known bad as soon as the header is complete: the payload is never waited for. */
		assert_int_equal(rgaps__frame_reader_feed(r, hdr, 3), 3);
		expect_nothing(r);
		assert_int_equal(rgaps__frame_reader_feed(r, hdr + 3, sizeof(hdr) - 3), 1);
		expect_error_sticks(r, -EMSGSIZE);
	}
	free(r);
}

static void test_zero_length(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t buf[RGAPS_FRAME_HDR + 8] = { 0, 0, 0, 0, 5, 0, 0, 0, 'h' };

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, buf, sizeof(buf)), RGAPS_FRAME_HDR);
	expect_error_sticks(r, -EBADMSG);
	free(r);
}

static void test_error_after_good_frame(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t *f = frame_new(4, 0);
	uint8_t bad[RGAPS_FRAME_HDR];

	assert_non_null(r);
	put_le32(bad, RGAPS_FRAME_MAX + 1);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, f, RGAPS_FRAME_HDR + 4), RGAPS_FRAME_HDR + 4);
	expect_frame(r, f, 4);
	assert_int_equal(rgaps__frame_reader_feed(r, bad, sizeof(bad)), sizeof(bad));
	expect_error_sticks(r, -EMSGSIZE);
	free(f);
	free(r);
}

static void test_truncated(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));
	uint8_t *f = frame_new(100, 9);

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, f, 2), 2);
	expect_nothing(r);
	assert_int_equal(space_of(r), 2);
	assert_int_equal(rgaps__frame_reader_feed(r, f + 2, 2 + 60), 2 + 60);
	expect_nothing(r);
	assert_int_equal(space_of(r), 40);
	/* Still waiting, however often asked. */
	expect_nothing(r);
	assert_int_equal(rgaps__frame_reader_feed(r, f + 64, 40), 40);
	expect_frame(r, f, 100);
	free(f);
	free(r);
}

static void test_feed_nothing(void **state)
{
	struct rgaps_frame_reader *r = malloc(sizeof(*r));

	assert_non_null(r);
	rgaps__frame_reader_init(r);
	assert_int_equal(rgaps__frame_reader_feed(r, "", 0), 0);
	rgaps__frame_reader_commit(r, 0);
	expect_nothing(r);
	assert_int_equal(space_of(r), RGAPS_FRAME_HDR);
	free(r);
}

static void test_commit_past_space_aborts(void **state)
{
	int status;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		static struct rgaps_frame_reader r;
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		rgaps__frame_reader_init(&r);
		rgaps__frame_reader_commit(&r, RGAPS_FRAME_HDR + 1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_encode),
		cmocka_unit_test(test_header_over_max_aborts),
		cmocka_unit_test(test_init_state),
		cmocka_unit_test(test_whole_frame),
		cmocka_unit_test(test_byte_by_byte),
		cmocka_unit_test(test_space_commit),
		cmocka_unit_test(test_two_frames_one_feed),
		cmocka_unit_test(test_max_size_frame),
		cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_zero_length),
		cmocka_unit_test(test_error_after_good_frame),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_feed_nothing),
		cmocka_unit_test(test_commit_past_space_aborts),
	};

	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
