/*
 * What every part of rgaps needs to know of a configuration (config.h): the
 * rules for topic names, the size strings ("256MiB") and the relay topologies
 * ("tree:2"). The files, the key
 * tables and their parser are rgapsd's (src/daemon/config_file.c).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

bool rgaps__name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '.' || ch == '_' || ch == '-';
}

bool rgaps__topic_name_valid(const char *name)
{
	return rgaps__topic_name_check(name, NULL, 0);
}

/* s for a message: printable ASCII as is, other bytes as \xNN, long ones cut with "..." */
static const char *name_shown(const char *s, char *buf, size_t len)
{
	size_t i, n = 0;

	for (i = 0; s[i] && n + 8 < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\\')
			buf[n++] = (char)c;
		else
			n += (size_t)snprintf(buf + n, len - n, "\\x%02x", c);
	}
	if (s[i])
		n += (size_t)snprintf(buf + n, len - n, "...");
	buf[n < len ? n : len - 1] = '\0';
	return buf;
}

bool rgaps__topic_name_check(const char *name, char *why, size_t len)
{
	char shown[96], what[48];
	size_t i;

	if (!name) {
		snprintf(what, sizeof(what), "no name");
		goto bad;
	}
	if (!name[0]) {
		snprintf(what, sizeof(what), "it is empty");
		goto bad;
	}
	if (name[0] == '.' || name[0] == '-') {
		snprintf(what, sizeof(what), "it starts with '%c'", name[0]);
		goto bad;
	}
	for (i = 0; name[i]; i++) {
		unsigned char c = (unsigned char)name[i];

		if (rgaps__name_char(name[i]))
			continue;
		if (c > 0x20 && c < 0x7f)
			snprintf(what, sizeof(what), "'%c' is not allowed", c);
		else if (c == ' ')
			snprintf(what, sizeof(what), "a space is not allowed");
		else
			snprintf(what, sizeof(what), "byte 0x%02x is not allowed%s", c,
				 c >= 0x80 ? " (only ASCII)" : "");
		goto bad;
	}
	if (i > RGAPS_TOPIC_NAME_MAX) {
		snprintf(what, sizeof(what), "it is %zu bytes long", i);
		goto bad;
	}
	return true;
bad:
	if (why && len)
		snprintf(why, len, "'%s' is not a topic name (%s): " RGAPS_TOPIC_NAME_RULE,
			 name ? name_shown(name, shown, sizeof(shown)) : "", what);
	return false;
}

_Static_assert(RGAPS_RELAY_FANOUT_MAX == 64, "rgaps__relay_parse's message names the bound");

const char *rgaps__relay_parse(const char *s, enum rgaps_relay *kind_p, uint32_t *fanout_p)
{
	static const struct {
		const char *name;
		enum rgaps_relay kind;
		uint32_t fanout;
	} fixed[] = {
		{ "star", RGAPS_RELAY_STAR, 0 },
		{ "chain", RGAPS_RELAY_CHAIN, 1 },
		{ "auto", RGAPS_RELAY_AUTO, 0 },
	};
	unsigned long k = 0;
	size_t i;

	if (!s)
		return "is not a relay topology";
	for (i = 0; i < RGAPS_ARRAY_SIZE(fixed); i++) {
		if (strcmp(s, fixed[i].name) == 0) {
			*kind_p = fixed[i].kind;
			*fanout_p = fixed[i].fanout;
			return NULL;
		}
	}
	if (strncmp(s, "tree:", 5) != 0)
		return "is not a relay topology: \"star\", \"chain\", \"tree:K\" or \"auto\"";
	/* Digits only, no sign, no spaces, no leading zero: one spelling per value. */
	for (i = 5; s[i] >= '0' && s[i] <= '9' && i < 8; i++)
		k = k * 10 + (unsigned long)(s[i] - '0');
	if (i == 5 || s[i] || s[5] == '0' || k < 2 || k > RGAPS_RELAY_FANOUT_MAX)
		return "is not \"tree:K\" with K, the children of each host, from 2 to 64";
	*kind_p = RGAPS_RELAY_TREE;
	*fanout_p = (uint32_t)k;
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Sizes                                                                    */

const char *rgaps__size_parse(const char *s, uint64_t *out_p)
{
	static const struct {
		const char *name;
		unsigned int shift;
	} units[] = {
		{ "", 0 },   { "B", 0 },   { "K", 10 },	 { "KB", 10 }, { "KiB", 10 },
		{ "M", 20 }, { "MB", 20 }, { "MiB", 20 }, { "G", 30 },	{ "GB", 30 },
		{ "GiB", 30 }, { "T", 40 }, { "TB", 40 },	 { "TiB", 40 },
	};
	const char *p = s;
	uint64_t ip = 0, frac = 0, fdiv = 1;
	unsigned __int128 total, fbytes;
	size_t i;

	if (*p < '0' || *p > '9')
		return "is not a size";
	for (; *p >= '0' && *p <= '9'; p++)
		if (__builtin_mul_overflow(ip, 10, &ip) ||
		    __builtin_add_overflow(ip, (uint64_t)(*p - '0'), &ip))
			return "is too large";
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return "is not a size";
		for (; *p >= '0' && *p <= '9'; p++) {
			if (fdiv >= UINT64_C(1000000000000000000))
				return "has too many decimals";
			frac = frac * 10 + (uint64_t)(*p - '0');
			fdiv *= 10;
		}
	}
	if (*p == ' ') {
		while (*p == ' ')
			p++;
		if (!*p)
			return "is not a size";
	}
	for (i = 0; i < RGAPS_ARRAY_SIZE(units); i++)
		if (strcasecmp(p, units[i].name) == 0)
			break;
	if (i == RGAPS_ARRAY_SIZE(units))
		return "is not a size";

	total = (unsigned __int128)ip << units[i].shift;
	fbytes = (unsigned __int128)frac << units[i].shift;
	if (fbytes % fdiv)
		return "is not a whole number of bytes";
	total += fbytes / fdiv;
	if (total > UINT64_MAX)
		return "is too large";
	*out_p = (uint64_t)total;
	return NULL;
}

int rgaps__parse_size(const char *s, uint64_t *out_p)
{
	uint64_t v;

	if (!s || rgaps__size_parse(s, &v))
		return -EINVAL;
	*out_p = v;
	return 0;
}

void rgaps__format_size(uint64_t v, char *buf, size_t len)
{
	static const struct {
		const char *name;
		unsigned int shift;
	} units[] = { { "TiB", 40 }, { "GiB", 30 }, { "MiB", 20 }, { "KiB", 10 } };

	if (!buf || !len)
		return;
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(units) && v; i++) {
		if ((v & ((UINT64_C(1) << units[i].shift) - 1)) == 0) {
			snprintf(buf, len, "%" PRIu64 "%s", v >> units[i].shift, units[i].name);
			return;
		}
	}
	snprintf(buf, len, "%" PRIu64 "B", v);
}

