/*
 * What every part of rgaps needs to know of a configuration (config.h): the
 * rules for topic names and the size strings ("256MiB"). The files, the key
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

bool rgaps_topic_name_valid(const char *name)
{
	size_t i;

	if (!name || !name[0] || name[0] == '.' || name[0] == '-')
		return false;
	for (i = 0; name[i]; i++)
		if (i >= RGAPS_TOPIC_NAME_MAX || !rgaps__name_char(name[i]))
			return false;
	return true;
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

int rgaps_parse_size(const char *s, uint64_t *out_p)
{
	uint64_t v;

	if (!s || rgaps__size_parse(s, &v))
		return -EINVAL;
	*out_p = v;
	return 0;
}

void rgaps_format_size(uint64_t v, char *buf, size_t len)
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

