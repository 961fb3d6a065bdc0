/*
 * What every libFuzzer target here shares: the entry point libFuzzer calls,
 * and REQUIRE, which stops the run on a broken invariant (a trap: libFuzzer
 * saves the input as a crash, ASan prints where).
 */
#ifndef RGAPS_TESTS_FUZZ_H
#define RGAPS_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                        \
	do {                                                                              \
		if (!(c))                                                                 \
			__builtin_trap();                                                 \
	} while (0)

#endif
