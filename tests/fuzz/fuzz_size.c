/*
 * libFuzzer target for the size strings of the configuration (rgaps__parse_size
 * and rgaps__format_size in src/common/config.c). The input, up to its first
 * NUL, is the string a user wrote. A reference parser built from the grammar
 * in config.h and docs/CONFIG.md ("Values and units") must agree with
 * rgaps__parse_size on whether it is a size and on its value; the output is
 * written only on success. Every value accepted, and the input's first 8
 * bytes read as a number, must format to the canonical text (no leading zero,
 * the largest binary unit that divides the value, "0B" for zero), parse back
 * to the same value, and format into a short buffer as a NUL-terminated
 * prefix of that text.
 *
 * The grammar: DIGITS [ "." DIGITS ] [ SPACES UNIT | UNIT ], UNIT one of B,
 * K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB, TiB, any case, all 1024-based;
 * the value must be a whole number of bytes and fit in 64 bits. Spaces are
 * only a separator: "1 " is junk (as the unit test says), not "1" with no
 * unit. The reference keeps one limit of the implementation that the docs do
 * not state, REF_MAX_DECIMALS below: see there.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc/common -Iinclude \
 *         src/common/config.c tests/fuzz/fuzz_size.c -lcjson -lm -o fuzz_size
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * rgaps__parse_size refuses more than 18 digits after the point ("has too many
 * decimals") even when the value is a whole number of bytes, e.g.
 * "1.0000000000000000000" or "0.00000095367431640625MiB" (exactly 1 byte).
 * The reference keeps that limit so the target checks everything else; build
 * with -DREF_MAX_DECIMALS=0 to check the documented grammar alone (then those
 * inputs trap).
 */
#ifndef REF_MAX_DECIMALS
#define REF_MAX_DECIMALS 18
#endif

#define SENTINEL UINT64_C(0xfeedfacecafebeef)

/* What rgaps__format_size writes, by power of 1024. */
static const char *const canon_units[] = { "B", "KiB", "MiB", "GiB", "TiB" };

static const struct {
	const char *name;
	unsigned int shift;
} ref_units[] = {
	{ "B", 0 },    { "K", 10 },  { "KB", 10 }, { "KiB", 10 }, { "M", 20 },
	{ "MB", 20 },  { "MiB", 20 }, { "G", 30 }, { "GB", 30 },  { "GiB", 30 },
	{ "T", 40 },   { "TB", 40 }, { "TiB", 40 },
};

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static char ascii_lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* The shift of unit s (whole rest of the string), or -1. */
static int ref_unit(const char *s)
{
	for (size_t i = 0; i < RGAPS_ARRAY_SIZE(ref_units); i++) {
		const char *u = ref_units[i].name;
		size_t k = 0;

		while (u[k] && s[k] && ascii_lower(u[k]) == ascii_lower(s[k]))
			k++;
		if (!u[k] && !s[k])
			return (int)ref_units[i].shift;
	}
	return -1;
}

/*
 * The grammar above, with exact arithmetic: the fraction 0.F (k digits, no
 * trailing zeros) times 2^shift is F * 2^shift / (2^k * 5^k). As F does not end
 * in 0, that is whole exactly when 5^k divides F and k <= shift, so k <= 40 and
 * 5^k, F mod 5^k and F / 5^k (< 2^k) all fit in 128 bits.
 */
static bool ref_size(const char *s, uint64_t *out_p)
{
	const char *frac = NULL;
	size_t nfrac = 0, k;
	unsigned __int128 ip = 0, pow5 = 1, rem = 0, quot = 0, total;
	int shift;

	if (!is_digit(*s))
		return false;
	for (; is_digit(*s); s++) {
		ip = ip * 10 + (unsigned)(*s - '0');
		if (ip > UINT64_MAX)
			return false; /* more than 64 bits before any unit */
	}
	if (*s == '.') {
		s++;
		if (!is_digit(*s))
			return false;
		frac = s;
		while (is_digit(*s))
			s++;
		nfrac = (size_t)(s - frac);
	}
	if (*s == ' ') {
		while (*s == ' ')
			s++;
		if (!*s)
			return false; /* spaces separate a unit; trailing ones are junk */
	}
	shift = *s ? ref_unit(s) : 0;
	if (shift < 0)
		return false;
	if (REF_MAX_DECIMALS && nfrac > REF_MAX_DECIMALS)
		return false;

	k = nfrac;
	while (k && frac[k - 1] == '0')
		k--;
	if (k > (size_t)shift)
		return false; /* cannot be whole (see above) */
	for (size_t i = 0; i < k; i++)
		pow5 *= 5;
	for (size_t i = 0; i < k; i++) { /* long division of F by 5^k */
		rem = rem * 10 + (unsigned)(frac[i] - '0');
		quot = quot * 10 + rem / pow5;
		rem %= pow5;
	}
	if (rem)
		return false; /* not a whole number of bytes */
	total = (ip << shift) + (quot << (shift - (int)k));
	if (total > UINT64_MAX)
		return false;
	*out_p = (uint64_t)total;
	return true;
}

/* v formatted: canonical, exact, and safe in a buffer of any length. */
static void check_format(uint64_t v, size_t short_len)
{
	char full[32], *small, *end;
	uint64_t back = SENTINEL, num;
	size_t n, unit;

	memset(full, 'x', sizeof(full));
	rgaps__format_size(v, full, sizeof(full));
	n = strnlen(full, sizeof(full));
	if (n == 0 || n >= sizeof(full))
		__builtin_trap();

	/* Exact: it parses back, by the reference and by the implementation. */
	if (rgaps__parse_size(full, &back) != 0 || back != v)
		__builtin_trap();
	back = SENTINEL;
	if (!ref_size(full, &back) || back != v)
		__builtin_trap();

	/* Canonical: digits without a leading zero, then B or the largest unit that is exact. */
	if (!is_digit(full[0]) || (full[0] == '0' && is_digit(full[1])))
		__builtin_trap();
	errno = 0;
	num = strtoull(full, &end, 10);
	if (errno)
		__builtin_trap();
	for (unit = 0; unit < RGAPS_ARRAY_SIZE(canon_units); unit++)
		if (strcmp(end, canon_units[unit]) == 0)
			break;
	if (unit == RGAPS_ARRAY_SIZE(canon_units))
		__builtin_trap(); /* K, KB or lower case are read, never written */
	if (v == 0 && strcmp(full, "0B") != 0)
		__builtin_trap();
	if (v != 0 && unit + 1 < RGAPS_ARRAY_SIZE(canon_units) && num % 1024 == 0)
		__builtin_trap(); /* a larger unit was exact */

	/* Truncated: a NUL-terminated prefix, nothing written past len. */
	small = malloc(short_len);
	if (!small)
		abort();
	rgaps__format_size(v, small, short_len);
	if (strnlen(small, short_len) != RGAPS_MIN(n, short_len - 1) ||
	    memcmp(small, full, strnlen(small, short_len)) != 0)
		__builtin_trap();
	free(small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint64_t v = SENTINEL, ref = SENTINEL, raw = 0;
	size_t short_len = 1 + (size ? data[0] % 24 : 0);
	bool ok;
	char *s;
	int rc;

	s = malloc(size + 1);
	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';

	rc = rgaps__parse_size(s, &v);
	ok = ref_size(s, &ref);
	if (rc != 0 && rc != -EINVAL)
		__builtin_trap();
	if ((rc == 0) != ok)
		__builtin_trap(); /* the implementation and the grammar disagree */
	if (rc == 0 && v != ref)
		__builtin_trap();
	if (rc != 0 && v != SENTINEL)
		__builtin_trap(); /* output written only on success */
	if (rc == 0)
		check_format(v, short_len);

	/* Any value at all formats exactly, not only those a string gave. */
	memcpy(&raw, data, RGAPS_MIN(size, sizeof(raw)));
	check_format(raw, short_len);
	check_format(raw >> (raw & 63), short_len);
	check_format(raw << ((raw >> 6) & 63), short_len); /* many low zero bits: units */

	free(s);
	return 0;
}
