/*
 * rgaps_version(): the version this library was built as, which is the
 * version of the rgaps.h it was built with (src/lib/meson.build refuses a
 * header whose numbers differ from the project's version).
 */
#include "../common/util.h"
#include "rgaps/rgaps.h"

RGAPS_EXPORT unsigned int rgaps_version(void)
{
	return RGAPS_VERSION_HEX;
}
