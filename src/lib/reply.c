/*
 * librgaps: reading rgapsd's replies. Every number, fd index and PCI address
 * is bounded before use (a reply is input like any other), and every object
 * rgapsd passes is checked for its size and seals before it is mapped.
 */
#include "reply.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../common/log.h"
#include "../common/shm.h"

int rgaps__reply_pci(const cJSON *o, const char *key, char pci[16])
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	pci[0] = 0;
	if (!v)
		return 0;
	if (!cJSON_IsString(v) || strlen(v->valuestring) >= 16)
		return -EPROTO;
	strcpy(pci, v->valuestring);
	return 0;
}

int rgaps__reply_num(const cJSON *o, const char *key, uint64_t max, uint64_t *v_p)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > (double)max ||
	    v->valuedouble != (double)(uint64_t)v->valuedouble)
		return -EPROTO;
	*v_p = (uint64_t)v->valuedouble;
	return 0;
}

/* An fd index from the reply: must name a received fd not yet used. */
int rgaps__reply_fd(const cJSON *o, const char *key, int *fds, int nfds, int *fd_p)
{
	uint64_t i;

	if (rgaps__reply_num(o, key, (uint64_t)nfds - 1, &i) || nfds == 0 || fds[i] < 0)
		return -EPROTO;
	*fd_p = fds[i];
	fds[i] = -1;
	return 0;
}

/*
 * Map an object rgapsd made: our own read-write (open to writable mappings until
 * we say "mapped"), anyone else's read-only, which must be sealed for good.
 */
int rgaps__reply_map(int fd, size_t size, bool writable, void **map_p)
{
	void *p;
	int r;

	/* Never an object someone could shrink (a touch beyond its end is SIGBUS) or punch. */
	r = rgaps__shm_check(fd, size, !writable);
	if (r) {
		rgaps_warn("rgapsd passed a %zu-byte segment that is %s: refused", size,
			   r == -EPERM ? "not sealed" : "not a shared-memory object of that size");
		return -EPROTO;
	}
	p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*map_p = p;
	return 0;
}

const cJSON *rgaps__reply_array(const cJSON *reply, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(reply, key);

	return cJSON_IsArray(v) ? v : NULL;
}

void rgaps__reply_fds_close(int *fds, int nfds)
{
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}
