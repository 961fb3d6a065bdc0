/*
 * HOST:PORT parsing (hostport.h).
 */
#include "hostport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "../common/util.h"

static bool host_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_';
}

static int bad(const char *s, char *why, size_t whylen, const char *fmt, ...) RGAPS_PRINTF(4, 5);

/* "'S' is not HOST:PORT (e.g. ...)" or, with fmt, "'S' ...": s shown printable, cut. */
static int bad(const char *s, char *why, size_t whylen, const char *fmt, ...)
{
	char shown[80], detail[160] = "";
	size_t i;
	va_list ap;

	if (!why || !whylen)
		return -EINVAL;
	for (i = 0; s && s[i] && i + 4 < sizeof(shown); i++)
		shown[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (s && s[i])
		memcpy(shown + i, "...", 3), i += 3;
	shown[i] = '\0';
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(detail, sizeof(detail), fmt, ap);
		va_end(ap);
		snprintf(why, whylen, "'%s'%s", shown, detail);
	} else {
		snprintf(why, whylen,
			 "'%s' is not HOST:PORT (e.g. \"10.0.0.2:7400\" or \"[fe80::1]:7400\")",
			 shown);
	}
	return -EINVAL;
}

int rgapsd_hostport_parse(const char *s, char *host, size_t hostlen, uint16_t *port_p, char *why,
			 size_t whylen)
{
	const char *h, *he, *colon;
	unsigned long port = 0;
	size_t hl, digits;

	if (!s)
		return bad("", why, whylen, NULL);
	if (s[0] == '[') {
		char v6[INET6_ADDRSTRLEN + 1];
		struct in6_addr a;
		const char *pct;

		h = s + 1;
		he = strchr(h, ']');
		if (!he || he == h || he[1] != ':')
			return bad(s, why, whylen, NULL);
		colon = he + 1;
		/* The address (a zone after '%' is the interface, resolved at connect). */
		pct = memchr(h, '%', (size_t)(he - h));
		hl = (size_t)((pct ? pct : he) - h);
		if (hl == 0 || hl >= sizeof(v6))
			return bad(s, why, whylen, NULL);
		memcpy(v6, h, hl);
		v6[hl] = '\0';
		if (inet_pton(AF_INET6, v6, &a) != 1)
			return bad(s, why, whylen, " is not HOST:PORT: '%s' is not an IPv6 address",
				   v6);
		if (pct) {
			if (pct + 1 == he)
				return bad(s, why, whylen, NULL);
			for (const char *z = pct + 1; z < he; z++)
				if (!host_char_ok(*z))
					return bad(s, why, whylen, NULL);
		}
	} else {
		h = s;
		colon = strrchr(s, ':');
		if (!colon || colon == s)
			return bad(s, why, whylen, NULL);
		if (memchr(s, ':', (size_t)(colon - s)))
			return bad(s, why, whylen,
				   ": write an IPv6 address in brackets, [ADDR]:PORT");
		he = colon;
		for (const char *c = h; c < he; c++)
			if (!host_char_ok(*c))
				return bad(
					s, why, whylen,
					" is not HOST:PORT: a host name holds only A-Z a-z 0-9 . _ -");
	}
	digits = strlen(colon + 1);
	if (digits == 0 || digits > 5)
		return bad(s, why, whylen, digits ? ": the port must be 1..65535" : NULL);
	for (const char *c = colon + 1; *c; c++) {
		if (*c < '0' || *c > '9')
			return bad(s, why, whylen, NULL);
		if (port <= 65535)
			port = port * 10 + (unsigned long)(*c - '0');
	}
	if (port < 1 || port > 65535)
		return bad(s, why, whylen, ": the port must be 1..65535");
	hl = (size_t)(he - h);
	if (hl > 255 || (host && hl >= hostlen))
		return bad(s, why, whylen, " is not HOST:PORT: the host is longer than %zu bytes",
			   host ? RGAPS_MIN(hostlen - 1, (size_t)255) : (size_t)255);
	if (host) {
		memcpy(host, h, hl);
		host[hl] = '\0';
	}
	if (port_p)
		*port_p = (uint16_t)port;
	return 0;
}
