/*
 * The shared-memory objects of rgaps (docs/SHM-LAYOUT.md, "The objects"):
 * anonymous memfds that rgapsd makes, sizes and seals, and hands out only as
 * file descriptors. No name exists anywhere (nothing to squat, to collide
 * with another daemon's or to leave behind after a crash), and no holder of
 * an fd can change an object's size: a mapping never reaches past its end.
 *
 * An object is made in three steps. Made (rgaps__shm_create): mode 0600,
 * sized and sealed against shrinking and growing; its owner may map it
 * writable. Backed (rgaps__shm_back): every page allocated, by whoever owns
 * its memory - rgapsd for its headers, regions and own pools, a publisher for
 * the pool it asked for - so that a lack of memory is an error there, not a
 * SIGBUS at a touch. Sealed (rgaps__shm_seal), once its owner has mapped it:
 * no new writable mapping, no write(2), no hole punched - ever, by anyone -
 * and refused unless every page is there. Writable mappings made before keep
 * working: the owner's, and rgapsd's own where it writes.
 */
#ifndef RGAPS_COMMON_SHM_H
#define RGAPS_COMMON_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RGAPS_SHM_NAME_MAX 160

/*
 * The label "rgaps-INSTANCE-TOPIC-ROLE" into buf (what ls -l /proc/PID/fd shows
 * of an object; it names nothing anyone can open); -ENAMETOOLONG if it does not fit.
 */
int rgaps__shm_name(char *buf, size_t len, const char *instance, const char *topic,
		    const char *role);
/*
 * Make an object of size bytes labelled name: mode 0600 (its fds cannot be
 * reopened through /proc by another user), sized, sealed against shrinking
 * and growing, not yet backed. Returns the fd (read-write, close-on-exec) or
 * -errno, with why saying what failed.
 */
int rgaps__shm_create(const char *name, uint64_t size, char *why, size_t whylen);
/*
 * Allocate every page of an object of size bytes (fallocate). 0, or -errno with
 * why in words ("cannot allocate 256MiB of shared memory: ...": -ENOMEM, or
 * -EFBIG beyond the file size limit).
 */
int rgaps__shm_back(int fd, uint64_t size, char *why, size_t whylen);
/*
 * Seal an object for good (see above): its owner has mapped and, if whole, backed
 * it. 0, or -errno with why: -EPERM its owner sealed its seals first, -EFAULT
 * (whole) a page of it is missing: never backed, or punched. Not whole: an object
 * of rgapsd's own, which it backs once sealed (rgaps__shm_back works on through
 * the seals), away from its loop.
 */
int rgaps__shm_seal(int fd, uint64_t size, bool whole, char *why, size_t whylen);
/*
 * Is fd an object of exactly size bytes that nobody can resize (made), and, if
 * sealed, one that nobody can map writable or punch any more? 0, -errno of
 * fstat/fcntl, -EBADFD (not a sealable object) or -EPERM (seals missing).
 */
int rgaps__shm_check(int fd, uint64_t size, bool sealed);
/* A new open file description of fd's object, read-only (mmap PROT_WRITE fails on it). */
int rgaps__shm_reopen_read_only(int fd);
/* Map an fd read-write shared. 0 or -errno. */
int rgaps__shm_map(int fd, size_t size, void **addr_p);

#endif
