#!/bin/sh
# meson's install script (src/lib/meson.build): after `ninja install` into the
# system itself (as root, no DESTDIR), refresh the loader's cache, so that
# programs find librgaps at once in a directory ld.so.conf names
# (/usr/local/lib/<triplet> on Debian). Packages (DESTDIR set) leave it to
# their own triggers.
[ -z "${DESTDIR:-}" ] || exit 0
[ "$(id -u)" = 0 ] || exit 0
for l in /sbin/ldconfig /usr/sbin/ldconfig; do
	[ -x "$l" ] && exec "$l"
done
exit 0
