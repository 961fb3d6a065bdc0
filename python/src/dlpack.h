/*
 * The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), version
 * 1.0 and the legacy (0.x) managed tensor: the structs every framework agrees
 * on, written out here from the specification rather than vendored. Only what
 * the rgaps extension produces and consumes.
 */
#ifndef RGPY_DLPACK_H
#define RGPY_DLPACK_H

#include <stdint.h>

#define RGPY_DLPACK_MAJOR 1
#define RGPY_DLPACK_MINOR 0

typedef enum {
	kDLCPU = 1,
	kDLCUDA = 2,
	kDLCUDAHost = 3,
	kDLOpenCL = 4,
	kDLVulkan = 7,
	kDLMetal = 8,
	kDLVPI = 9,
	kDLROCM = 10,
	kDLROCMHost = 11,
	kDLExtDev = 12,
	kDLCUDAManaged = 13,
	kDLOneAPI = 14,
} DLDeviceType;

typedef struct {
	DLDeviceType device_type;
	int32_t device_id;
} DLDevice;

typedef enum {
	kDLInt = 0,
	kDLUInt = 1,
	kDLFloat = 2,
	kDLOpaqueHandle = 3,
	kDLBfloat = 4,
	kDLComplex = 5,
	kDLBool = 6,
} DLDataTypeCode;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides; /* in elements; NULL: compact row-major */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
	uint32_t major;
	uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1ull << 1)

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif
