/*
 * A plugin that does nothing, built several times with different descriptors
 * for tests/unit/test_registry.c: FAKE_KIND, FAKE_NAME, FAKE_ABI,
 * FAKE_PRIORITY and FAKE_PORT_OFFSET set what it declares. Its operations are
 * all absent (the loader stubs them with -ENOTSUP).
 */
#include "rgaps/plugin.h"

static const struct rgaps_transport_ops no_ops;

RGAPS_PLUGIN_EXPORT const struct rgaps_plugin rgaps_plugin = {
	.abi_version = FAKE_ABI,
	.struct_size = sizeof(struct rgaps_plugin),
	.kind = FAKE_KIND,
	.ops_size = 0,
	.name = FAKE_NAME,
	.description = "a test plugin",
	.ops = &no_ops,
	.priority = FAKE_PRIORITY,
	.data_port_offset = FAKE_PORT_OFFSET,
};
