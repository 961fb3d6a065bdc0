/*
 * dtypes and the array attribute block (version 1) that the Python package
 * sends in each message's rgaps attribute block: dtype, shape, strides and a
 * user header. The layout is drawn in docs/PYTHON.md ("The attribute block");
 * the C library carries it as opaque bytes. A subscriber decodes what any
 * publisher wrote, so every field is checked before use: a block that lies
 * about its size, or describes more bytes than the message has, is refused
 * and the message is shown as raw bytes.
 */
#include <errno.h>
#include <string.h>

#include "rgpy.h"

static const uint8_t magic[2] = { 'r', 'g' };

struct dtype_row {
	uint8_t code, bits;
	const char *name, *format, *typestr;
};

/* Every dtype rgaps describes; the buffer format and typestr of each, if any. */
static const struct dtype_row dtypes[] = {
	{ kDLInt, 8, "int8", "b", "|i1" },
	{ kDLInt, 16, "int16", "h", "<i2" },
	{ kDLInt, 32, "int32", "i", "<i4" },
	{ kDLInt, 64, "int64", "q", "<i8" },
	{ kDLUInt, 8, "uint8", "B", "|u1" },
	{ kDLUInt, 16, "uint16", "H", "<u2" },
	{ kDLUInt, 32, "uint32", "I", "<u4" },
	{ kDLUInt, 64, "uint64", "Q", "<u8" },
	{ kDLFloat, 16, "float16", "e", "<f2" },
	{ kDLFloat, 32, "float32", "f", "<f4" },
	{ kDLFloat, 64, "float64", "d", "<f8" },
	{ kDLBfloat, 16, "bfloat16", NULL, NULL },
	{ kDLComplex, 64, "complex64", "Zf", "<c8" },
	{ kDLComplex, 128, "complex128", "Zd", "<c16" },
	{ kDLBool, 8, "bool", "?", "|b1" },
};
#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static const struct dtype_row *row_of(DLDataType t)
{
	if (t.lanes != 1)
		return NULL;
	for (size_t i = 0; i < NDTYPES; i++)
		if (dtypes[i].code == t.code && dtypes[i].bits == t.bits)
			return &dtypes[i];
	return NULL;
}

unsigned rgpy_dtype_size(DLDataType t)
{
	return row_of(t) ? t.bits / 8u : 0;
}

const char *rgpy_dtype_name(DLDataType t)
{
	const struct dtype_row *r = row_of(t);

	return r ? r->name : NULL;
}

const char *rgpy_dtype_format(DLDataType t)
{
	const struct dtype_row *r = row_of(t);

	return r ? r->format : NULL;
}

const char *rgpy_dtype_typestr(DLDataType t)
{
	const struct dtype_row *r = row_of(t);

	return r ? r->typestr : NULL;
}

static DLDataType dt(uint8_t code, uint8_t bits)
{
	return (DLDataType){ .code = code, .bits = bits, .lanes = 1 };
}

int rgpy_dtype_from_format(const char *fmt, Py_ssize_t itemsize, DLDataType *t_p)
{
	DLDataType t;
	uint8_t bits;

	if (!fmt)
		fmt = "B";
	/* Native or little-endian byte order (this code runs on little-endian hosts only). */
	if (*fmt == '@' || *fmt == '=' || *fmt == '<')
		fmt++;
	if (itemsize <= 0 || itemsize > 16)
		return -EINVAL;
	bits = (uint8_t)(itemsize * 8);
	if (fmt[0] == 'Z' && fmt[1] && !fmt[2]) {
		if ((fmt[1] == 'f' && itemsize == 8) || (fmt[1] == 'd' && itemsize == 16)) {
			*t_p = dt(kDLComplex, bits);
			return 0;
		}
		return -EINVAL;
	}
	if (!fmt[0] || fmt[1])
		return -EINVAL;
	switch (fmt[0]) {
	case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
		t = dt(kDLInt, bits);
		break;
	case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case 'c':
		t = dt(kDLUInt, bits);
		break;
	case 'e': case 'f': case 'd':
		t = dt(kDLFloat, bits);
		break;
	case '?':
		t = dt(kDLBool, bits);
		break;
	default:
		return -EINVAL;
	}
	/* The letter and the item size must agree ('f' with 8 bytes is not a float). */
	if (!row_of(t) || (fmt[0] == 'e' && bits != 16) || (fmt[0] == 'f' && bits != 32) ||
	    (fmt[0] == 'd' && bits != 64) || (fmt[0] == '?' && bits != 8) ||
	    (fmt[0] == 'c' && bits != 8))
		return -EINVAL;
	*t_p = t;
	return 0;
}

int rgpy_dtype_from_typestr(const char *ts, DLDataType *t_p)
{
	for (size_t i = 0; i < NDTYPES; i++) {
		const char *s = dtypes[i].typestr;

		if (!s)
			continue;
		/* "|u1", "<u1" and "=u1" all name one-byte types. */
		if (!strcmp(ts, s) || (ts[0] && strchr("<|=", ts[0]) && !strcmp(ts + 1, s + 1))) {
			*t_p = dt(dtypes[i].code, dtypes[i].bits);
			return 0;
		}
	}
	return -EINVAL;
}

int rgpy_dtype_from_name(const char *name, DLDataType *t_p)
{
	static const struct {
		const char *alias, *name;
	} aliases[] = {
		/* numpy's meanings of the C-ish names */
		{ "bool_", "bool" },	    { "half", "float16" },	{ "single", "float32" },
		{ "double", "float64" },    { "float", "float64" },	{ "int", "int64" },
		{ "complex", "complex128" }, { "bf16", "bfloat16" },	{ "f2", "float16" },
		{ "f4", "float32" },	    { "f8", "float64" },	{ "c8", "complex64" },
		{ "c16", "complex128" },    { "i1", "int8" },		{ "i2", "int16" },
		{ "i4", "int32" },	    { "i8", "int64" },		{ "u1", "uint8" },
		{ "u2", "uint16" },	    { "u4", "uint32" },		{ "u8", "uint64" },
		{ "b1", "bool" },
	};

	if (!strncmp(name, "torch.", 6))
		name += 6;
	for (size_t i = 0; i < NDTYPES; i++)
		if (!strcmp(name, dtypes[i].name)) {
			*t_p = dt(dtypes[i].code, dtypes[i].bits);
			return 0;
		}
	if (!rgpy_dtype_from_typestr(name, t_p))
		return 0;
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
		if (!strcmp(name, aliases[i].alias))
			return rgpy_dtype_from_name(aliases[i].name, t_p);
	return -EINVAL;
}

/* ---------------------------------------------------------------- descriptions */

static int span_of(const struct rgpy_desc *d, uint64_t *span_p)
{
	uint64_t item = rgpy_dtype_size(d->dtype), n = 1, last = 0, t;

	for (unsigned i = 0; i < d->ndim; i++) {
		if (d->shape[i] < 0 || (d->has_strides && d->strides[i] < 0))
			return -EINVAL;
		if (d->shape[i] == 0) {
			*span_p = 0;
			return 0;
		}
	}
	for (unsigned i = 0; i < d->ndim; i++) {
		if (__builtin_mul_overflow(n, (uint64_t)d->shape[i], &n))
			return -EOVERFLOW;
		if (d->has_strides &&
		    (__builtin_mul_overflow((uint64_t)(d->shape[i] - 1), (uint64_t)d->strides[i], &t) ||
		     __builtin_add_overflow(last, t, &last)))
			return -EOVERFLOW;
	}
	if (d->has_strides)
		n = last + 1;
	if (__builtin_mul_overflow(n, item, span_p))
		return -EOVERFLOW;
	return 0;
}

int rgpy_desc_check(struct rgpy_desc *d, bool require_dense)
{
	uint64_t n = 1;
	int r;

	if (!rgpy_dtype_size(d->dtype) || d->ndim > RGPY_MAX_NDIM)
		return -EINVAL;
	r = span_of(d, &d->span);
	if (r || !require_dense || !d->has_strides || d->span == 0)
		return r;
	/* Dense: the strides are a permutation of contiguous ones (Fortran order, transposes). */
	for (unsigned i = 0; i < d->ndim; i++)
		n *= (uint64_t)d->shape[i];
	return d->span == n * rgpy_dtype_size(d->dtype) ? 0 : -EINVAL;
}

void rgpy_desc_normalise(struct rgpy_desc *d)
{
	int64_t expect = 1;

	if (!d->has_strides)
		return;
	for (int i = (int)d->ndim - 1; i >= 0; i--) {
		if (d->shape[i] != 1 && d->strides[i] != expect)
			return;
		expect *= d->shape[i];
	}
	d->has_strides = false;
}

void rgpy_desc_bytes(struct rgpy_desc *d, uint64_t n)
{
	memset(d, 0, sizeof(*d));
	d->dtype = dt(kDLUInt, 8);
	d->ndim = 1;
	d->shape[0] = (int64_t)n;
	d->span = n;
}

/* ---------------------------------------------------------------- the block */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put64(uint8_t *p, int64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static int64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return (int64_t)v;
}

int rgpy_attrs_encode(const struct rgpy_desc *d, const void *header, size_t header_len,
		      uint8_t *out, size_t *len_p)
{
	size_t dims = (size_t)d->ndim * 8 * (d->has_strides ? 2 : 1), len;
	uint8_t *p = out;

	if (d->ndim > RGPY_MAX_NDIM)
		return -EINVAL;
	len = RGPY_ATTR_HDR + dims + header_len;
	if (header_len > RGAPS_ATTR_MAX || len > RGAPS_ATTR_MAX)
		return -E2BIG;
	memcpy(p, magic, 2);
	p[2] = RGPY_ATTR_VERSION;
	p[3] = d->has_strides ? RGPY_ATTR_FLAG_STRIDES : 0;
	p[4] = d->dtype.code;
	p[5] = d->dtype.bits;
	put16(p + 6, d->dtype.lanes);
	p[8] = d->ndim;
	p[9] = 0;
	put16(p + 10, (uint16_t)header_len);
	p += RGPY_ATTR_HDR;
	for (unsigned i = 0; i < d->ndim; i++, p += 8)
		put64(p, d->shape[i]);
	if (d->has_strides)
		for (unsigned i = 0; i < d->ndim; i++, p += 8)
			put64(p, d->strides[i]);
	if (header_len)
		memcpy(p, header, header_len);
	*len_p = len;
	return 0;
}

int rgpy_attrs_decode(const uint8_t *a, size_t len, uint64_t payload, struct rgpy_desc *d,
		      const char **why_p)
{
	const uint8_t *p;
	size_t need;

	*why_p = NULL;
	if (len < 3 || memcmp(a, magic, 2)) {
		*why_p = "the attribute block is not an rgaps array description";
		return -ENOMSG;
	}
	if (a[2] != RGPY_ATTR_VERSION) {
		*why_p = "the attribute block has a version this rgaps does not know";
		return -ENOMSG;
	}
	if (len < RGPY_ATTR_HDR) {
		*why_p = "truncated array description";
		return -EINVAL;
	}
	memset(d, 0, sizeof(*d));
	if (a[3] & ~RGPY_ATTR_FLAG_STRIDES || a[9]) {
		*why_p = "array description with unknown flags";
		return -EINVAL;
	}
	d->has_strides = a[3] & RGPY_ATTR_FLAG_STRIDES;
	d->dtype = (DLDataType){ .code = a[4], .bits = a[5], .lanes = get16(a + 6) };
	d->ndim = a[8];
	d->header_len = get16(a + 10);
	if (!rgpy_dtype_size(d->dtype)) {
		*why_p = "array description with a dtype rgaps does not know";
		return -EINVAL;
	}
	if (d->ndim > RGPY_MAX_NDIM) {
		*why_p = "array description with more than 15 dimensions";
		return -EINVAL;
	}
	need = RGPY_ATTR_HDR + (size_t)d->ndim * 8 * (d->has_strides ? 2 : 1) + d->header_len;
	if (need != len) {
		*why_p = "array description whose length does not match its fields";
		return -EINVAL;
	}
	p = a + RGPY_ATTR_HDR;
	for (unsigned i = 0; i < d->ndim; i++, p += 8)
		d->shape[i] = get64(p);
	if (d->has_strides)
		for (unsigned i = 0; i < d->ndim; i++, p += 8)
			d->strides[i] = get64(p);
	d->header_off = (uint16_t)(p - a);
	if (rgpy_desc_check(d, false)) {
		*why_p = "array description with a negative or overflowing shape or stride";
		return -EINVAL;
	}
	if (d->span > payload) {
		*why_p = "array description larger than the message";
		return -EINVAL;
	}
	return 0;
}
