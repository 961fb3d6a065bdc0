/*
 * "HOST:PORT" and "[IPV6]:PORT", as rgapsd's "listen" and "peers" name
 * daemons: one parser for the configuration check, the peer plane and the
 * data links, so that what --check-config accepts is what start accepts.
 */
#ifndef RGAPSD_HOSTPORT_H
#define RGAPSD_HOSTPORT_H

#include <stddef.h>
#include <stdint.h>

/*
 * Host: a name or IPv4 address of A-Z a-z 0-9 . _ -, or an IPv6 address in
 * brackets (with an optional %zone); port 1..65535. 0 with host (NUL-terminated,
 * hostlen bytes at most) and *port_p written when they are not NULL; or -EINVAL
 * with why ("'a!b:7400' is not HOST:PORT: ...") when why is not NULL.
 */
int rgapsd_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port_p, char *why,
			 size_t whylen);

#endif
