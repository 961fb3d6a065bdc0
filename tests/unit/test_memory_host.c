/*
 * The host memory plugin (plugins/memory-host), loaded through the plugin
 * loader as rgapsd and librgaps load it. Its pools: made through the
 * environment (sealed memfds, docs/SHM-LAYOUT.md), imported only when a
 * reader's check holds (sealed for good unless it is the importer's own).
 * Its fences: a handle of zeros and the slot's state word, which a reader
 * queries where the publisher wrote it; any other handle - a path, say, as
 * the backend's handles once named a segment to map - is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "plugin_loader.h"
#include "shm.h"

#ifndef PLUGIN_DIR
#error "PLUGIN_DIR"
#endif

static struct rgaps_loaded_plugin *lp;

static int setup(void **state)
{
	struct rgaps_plugin_env env;
	char err[512];

	(void)state;
	if (rgaps__plugin_load(PLUGIN_DIR, RGAPS_PLUGIN_MEMORY, "host", &lp, err, sizeof(err)))
		return -1;
	rgaps__plugin_env_init(&env, RGAPS_ROLE_DAEMON, NULL);
	return lp->ops.memory.init(&env, &lp->ctx);
}

static int teardown(void **state)
{
	(void)state;
	lp->ops.memory.fini(lp->ctx);
	rgaps__plugin_unload(lp);
	return 0;
}

static void test_fence_handles_name_nothing(void **state)
{
	uint8_t handle[RGAPS_FENCE_HANDLE_LEN], path[RGAPS_FENCE_HANDLE_LEN] = "RGHF1";
	uint64_t word = 0;
	void *mine, *theirs, *bad = NULL;

	(void)state;
	memset(handle, 0xff, sizeof(handle));
	assert_int_equal(
		lp->ops.memory.fence_create(lp->ctx, -1, RGAPS_FENCE_IPC, &mine, handle, &word), 0);
	for (size_t i = 0; i < sizeof(handle); i++)
		assert_int_equal(handle[i], 0);
	/* A reader opens it on the state word of the stream it reads. */
	assert_int_equal(lp->ops.memory.fence_open(lp->ctx, handle, &word, &theirs), 0);
	assert_int_equal(lp->ops.memory.fence_query(lp->ctx, theirs), 0); /* never recorded */
	assert_int_equal(lp->ops.memory.fence_record(lp->ctx, mine, NULL), 0);
	assert_true(word != 0);
	/* A completion time in the future, as a publisher may write it: not yet. */
	word = UINT64_MAX;
	assert_int_equal(lp->ops.memory.fence_query(lp->ctx, theirs), -EAGAIN);
	word = 1;
	assert_int_equal(lp->ops.memory.fence_query(lp->ctx, theirs), 0);
	/* A handle that names a path, or anything at all, is refused without a look at it. */
	strcpy((char *)path + 8, "/rgaps-hostfence-1-0");
	assert_int_equal(lp->ops.memory.fence_open(lp->ctx, path, &word, &bad), -EINVAL);
	assert_null(bad);
	handle[63] = 1;
	assert_int_equal(lp->ops.memory.fence_open(lp->ctx, handle, &word, &bad), -EINVAL);
	lp->ops.memory.fence_destroy(lp->ctx, theirs);
	lp->ops.memory.fence_destroy(lp->ctx, mine);
}

static void test_pools_are_sealed_objects(void **state)
{
	const uint64_t size = 1 << 20;
	struct rgaps_mem_region pool, own, other;
	char why[256];
	int fd, plain;

	(void)state;
	assert_int_equal(lp->ops.memory.pool_create(lp->ctx, "rgaps-test-pool", size, -1, &pool),
			 0);
	/* Its owner imports it before it is sealed for good... */
	fd = fcntl(pool.fd, F_DUPFD_CLOEXEC, 0);
	assert_int_equal(lp->ops.memory.pool_import(lp->ctx, fd, size, -1, 0, &own), 0);
	lp->ops.memory.pool_release(lp->ctx, &own);
	/* ...a reader only after: a read-only import of an object open to writers is refused. */
	fd = rgaps__shm_reopen_read_only(pool.fd);
	assert_int_equal(lp->ops.memory.pool_import(lp->ctx, fd, size, -1,
						    RGAPS_MEM_IMPORT_READONLY, &other),
			 -EPERM);
	assert_int_equal(rgaps__shm_back(pool.fd, size, why, sizeof(why)), 0);
	assert_int_equal(rgaps__shm_seal(pool.fd, size, true, why, sizeof(why)), 0);
	fd = rgaps__shm_reopen_read_only(pool.fd);
	assert_int_equal(lp->ops.memory.pool_import(lp->ctx, fd, size, -1,
						    RGAPS_MEM_IMPORT_READONLY, &other),
			 0);
	/* Another size, or a plain file, is refused (and the fd consumed either way). */
	fd = rgaps__shm_reopen_read_only(pool.fd);
	assert_int_equal(lp->ops.memory.pool_import(lp->ctx, fd, size / 2, -1,
						    RGAPS_MEM_IMPORT_READONLY, &own),
			 -EBADFD);
	plain = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	assert_true(plain >= 0);
	assert_int_not_equal(lp->ops.memory.pool_import(lp->ctx, plain, size, -1,
							RGAPS_MEM_IMPORT_READONLY, &own),
			     0);
	lp->ops.memory.pool_release(lp->ctx, &other);
	lp->ops.memory.pool_release(lp->ctx, &pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fence_handles_name_nothing),
		cmocka_unit_test(test_pools_are_sealed_objects),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
