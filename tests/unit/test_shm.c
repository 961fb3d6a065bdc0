/*
 * The shared-memory objects (src/common/shm.h): made private, sized and sealed
 * against resizing; backed whole; sealed for good once its owner has mapped
 * and backed it (no new writable mapping, no hole, while the owner's mapping
 * keeps working), and refused when a page is missing then; read-only reopens
 * that stay read-only; and the check a reader makes before it maps one.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/falloc.h>

#include <cmocka.h>

#include "shm.h"

#define SIZE (256u * 1024u)

static blkcnt_t allocated(int fd)
{
	struct stat st;

	assert_int_equal(fstat(fd, &st), 0);
	return st.st_blocks * 512;
}

/* A made and backed object, as rgapsd makes its own. */
static int made_and_backed(const char *name)
{
	char why[256] = "";
	int fd = rgaps__shm_create(name, SIZE, why, sizeof(why));

	assert_true(fd >= 0);
	assert_int_equal(rgaps__shm_back(fd, SIZE, why, sizeof(why)), 0);
	return fd;
}

static void test_made_private_and_resize_proof_then_backed(void **state)
{
	char why[256] = "";
	struct stat st;
	int fd = rgaps__shm_create("rgaps-test-made", SIZE, why, sizeof(why));

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_size, SIZE);
	assert_int_equal(allocated(fd), 0);
	assert_int_equal(rgaps__shm_back(fd, SIZE, why, sizeof(why)), 0);
	assert_true(allocated(fd) >= (blkcnt_t)SIZE);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_not_equal(ftruncate(fd, 0), 0);
	assert_int_not_equal(ftruncate(fd, 2 * SIZE), 0);
	assert_int_not_equal(pwrite(fd, "x", 1, SIZE), 1);
	assert_int_equal(rgaps__shm_check(fd, SIZE, false), 0);
	assert_int_equal(rgaps__shm_check(fd, SIZE, true), -EPERM); /* not sealed for good yet */
	assert_int_equal(rgaps__shm_check(fd, SIZE - 4096, false), -EBADFD);
	close(fd);
}

static void test_sealed_keeps_the_owners_mapping_and_nothing_else(void **state)
{
	char why[256] = "";
	int fd = made_and_backed("rgaps-test-seal");
	uint8_t *own;
	void *again;

	(void)state;
	own = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_ptr_not_equal(own, MAP_FAILED);
	assert_int_equal(rgaps__shm_seal(fd, SIZE, true, why, sizeof(why)), 0);
	/* Sealed: nothing can punch, map writable or resize it. */
	assert_true(allocated(fd) >= (blkcnt_t)SIZE);
	assert_int_equal(rgaps__shm_check(fd, SIZE, true), 0);
	assert_int_not_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SIZE), 0);
	assert_int_not_equal(madvise(own, SIZE, MADV_REMOVE), 0);
	again = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_ptr_equal(again, MAP_FAILED);
	assert_int_not_equal(pwrite(fd, "x", 1, 0), 1);
	assert_int_not_equal(ftruncate(fd, 0), 0);
	assert_int_not_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
	/* The owner's mapping, made before, writes on. */
	own[SIZE - 1] = 0x5a;
	assert_int_equal(own[SIZE - 1], 0x5a);
	munmap(own, SIZE);
	close(fd);
}

static void test_seal_refuses_holes(void **state)
{
	char why[256] = "";
	int fd = made_and_backed("rgaps-test-holes"), sparse;

	(void)state;
	/* The owner punched a page before saying "mapped": missing for good once sealed. */
	assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096, 4096), 0);
	assert_int_equal(rgaps__shm_seal(fd, SIZE, true, why, sizeof(why)), -EFAULT);
	assert_non_null(strstr(why, "a page of the object is missing"));
	assert_int_not_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SIZE),
			     0); /* and no more can be punched */
	close(fd);
	/* An owner that never backed its memory. */
	sparse = rgaps__shm_create("rgaps-test-sparse", SIZE, why, sizeof(why));
	assert_true(sparse >= 0);
	assert_int_equal(rgaps__shm_seal(sparse, SIZE, true, why, sizeof(why)), -EFAULT);
	close(sparse);
}

static void test_seal_refused_when_the_owner_sealed_first(void **state)
{
	char why[256] = "";
	int fd = made_and_backed("rgaps-test-owner");

	(void)state;
	/* A hostile owner seals the seals: rgapsd cannot take write access away any more. */
	assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL), 0);
	assert_int_equal(rgaps__shm_seal(fd, SIZE, true, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "its owner sealed its seals first"));
	assert_int_equal(rgaps__shm_check(fd, SIZE, true), -EPERM);
	close(fd);
}

static void test_read_only_reopen_stays_read_only(void **state)
{
	char why[256] = "";
	int fd = made_and_backed("rgaps-test-ro"), ro;
	void *p;

	(void)state;
	assert_int_equal(rgaps__shm_seal(fd, SIZE, true, why, sizeof(why)), 0);
	ro = rgaps__shm_reopen_read_only(fd);
	assert_true(ro >= 0);
	assert_int_equal(fcntl(ro, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_ptr_equal(mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0), MAP_FAILED);
	p = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, ro, 0);
	assert_ptr_not_equal(p, MAP_FAILED);
	assert_int_not_equal(mprotect(p, SIZE, PROT_READ | PROT_WRITE), 0);
	assert_int_not_equal(ftruncate(ro, 0), 0);
	assert_int_not_equal(fallocate(ro, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, SIZE), 0);
	assert_int_equal(rgaps__shm_check(ro, SIZE, true), 0);
	munmap(p, SIZE);
	close(ro);
	close(fd);
}

static void test_check_refuses_other_files(void **state)
{
	char path[] = "/tmp/rgaps-test-shm-XXXXXX";
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(ftruncate(fd, SIZE), 0);
	assert_int_equal(rgaps__shm_check(fd, SIZE, false), -EBADFD); /* no seals at all */
	close(fd);
}

static void test_create_says_why_it_fails(void **state)
{
	struct rlimit was, low;
	char why[256] = "";
	void (*old)(int);

	(void)state;
	assert_int_equal(rgaps__shm_create("rgaps-test-zero", 0, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "0 bytes"));
	/*
	 * An object beyond the file size limit is an error, in words. (fallocate's own
	 * ENOMEM takes the same path, but cannot be had here without the OOM killer.)
	 */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	low = (struct rlimit){ SIZE / 2, was.rlim_max };
	old = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &low), 0);
	assert_int_equal(rgaps__shm_create("rgaps-test-big", SIZE, why, sizeof(why)), -EFBIG);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, old);
	assert_non_null(strstr(why, "cannot allocate 256KiB of shared memory"));
	assert_non_null(strstr(why, "file size limit"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_made_private_and_resize_proof_then_backed),
		cmocka_unit_test(test_sealed_keeps_the_owners_mapping_and_nothing_else),
		cmocka_unit_test(test_seal_refuses_holes),
		cmocka_unit_test(test_seal_refused_when_the_owner_sealed_first),
		cmocka_unit_test(test_read_only_reopen_stays_read_only),
		cmocka_unit_test(test_check_refuses_other_files),
		cmocka_unit_test(test_create_says_why_it_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
