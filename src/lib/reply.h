/*
 * librgaps internals: reading rgapsd's replies (docs/PROTOCOL.md). A reply is
 * untrusted input: each reader bounds what it takes and returns -EPROTO
 * when the reply is malformed.
 */
#ifndef RGAPS_LIB_REPLY_H
#define RGAPS_LIB_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* An optional PCI address rgapsd names a GPU by: "" when absent; -EPROTO when malformed. */
int rgaps__reply_pci(const struct cJSON *o, const char *key, char pci[16]);
/* A whole number in [0, max] from the reply, else -EPROTO. */
int rgaps__reply_num(const struct cJSON *o, const char *key, uint64_t max, uint64_t *v_p);
/* An fd index from the reply: must name a received fd not yet used (taken: set to -1). */
int rgaps__reply_fd(const struct cJSON *o, const char *key, int *fds, int nfds, int *fd_p);
/*
 * Map an object rgapsd made: our own read-write (open to writable mappings until
 * we say "mapped"), anyone else's read-only, which must be sealed for good.
 */
int rgaps__reply_map(int fd, size_t size, bool writable, void **map_p);
/* The array of the reply's key, NULL when absent or not an array. */
const struct cJSON *rgaps__reply_array(const struct cJSON *reply, const char *key);
/* Close the fds of a reply that were not taken (-1). */
void rgaps__reply_fds_close(int *fds, int nfds);

#endif
