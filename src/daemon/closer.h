/*
 * Closing what clients can make a close wait for, off the loop
 * (docs/SECURITY.md, "File descriptors"). The last close of a file runs its
 * release in the closing thread, and some releases wait for as long as the
 * file's owner wants: a TCP socket with SO_LINGER and data stuck behind a zero
 * window waits out its linger time (measured: 8-15 s of a stalled loop, and a
 * peer that declared the host dead). rgapsd never closes a file a client may
 * have handed it on its loop: the control socket asks the kernel to refuse
 * client descriptors, and where the kernel cannot, it gives them and the
 * client connections (whose unread bytes may carry more) to the closer.
 *
 * The closer is one thread. A socket is first made to close at once (SO_LINGER
 * {on, 0} and a disconnect: its unsent bytes are dropped and the peer gets a
 * reset), so the thread itself is kept waiting only by a client that re-arms
 * its linger in the instant between the two calls; a close that lasts over a
 * second is logged (rate-limited).
 *
 * Lifecycle: start -> close (any thread, never waits) -> stop (the loop at
 * exit: what is still queued is closed, except behind a close that does not
 * end within a second; the process's exit closes those without waiting).
 */
#ifndef RGAPSD_CLOSER_H
#define RGAPSD_CLOSER_H

#include <stdint.h>

struct rgapsd_closer;

struct rgapsd_closer_stats {
	uint64_t closed;  /* descriptors closed by the thread */
	uint64_t slow;	  /* of them, closes that took over a second */
	uint32_t pending; /* now: queued, or being closed */
};

int rgapsd_closer_start(struct rgapsd_closer **c_p);
/* Hand fd over: it is closed on the closer's thread. Never waits. */
void rgapsd_closer_close(struct rgapsd_closer *c, int fd);
void rgapsd_closer_stats(struct rgapsd_closer *c, struct rgapsd_closer_stats *st);
void rgapsd_closer_stop(struct rgapsd_closer *c);

#endif
