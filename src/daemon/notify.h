/*
 * rgapsd under systemd (Type=notify, docs/PACKAGING.md, decision 34 in
 * docs/DECISIONS.md): readiness, status and the watchdog, by the sd_notify
 * protocol written directly (a datagram to $NOTIFY_SOCKET). Without
 * $NOTIFY_SOCKET every call does nothing.
 *
 * Lifecycle: rgapsd_notify_start() once the control socket serves (sends
 * READY=1 and a first STATUS=) -> the loop's timer keeps STATUS= current and
 * sends WATCHDOG=1 every half of $WATCHDOG_USEC -> rgapsd_notify_stop() at
 * shutdown (sends STOPPING=1, closes the timer; memory freed once libuv has
 * closed it).
 */
#ifndef RGAPSD_NOTIFY_H
#define RGAPSD_NOTIFY_H

struct rgapsd;

/* 0 (also when not under systemd), or -errno when $NOTIFY_SOCKET is unusable (logged). */
int rgapsd_notify_start(struct rgapsd *d);
void rgapsd_notify_stop(struct rgapsd *d);

#endif
