// Calls export-table entry 0x7d8 (nvidia-smi 555's -pm) with a marked
// third argument, which nvidia-smi passes uninitialized and reads back:
// 0 says legacy persistence mode, anything else "via daemon".
#include <stdio.h>

#include <nvml.h>

nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id);

static const unsigned char smi_table[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					    0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

int main(void)
{
	nvmlDevice_t dev;
	const void *t;
	if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
	    nvmlInternalGetExportTable(&t, smi_table) != NVML_SUCCESS)
		return 1;
	if (*(const unsigned long long *)t <= 0x7d8) {
		printf("the table ends before 0x7d8\n");
		return 1;
	}
	int (*set)(nvmlDevice_t, unsigned, unsigned *) = *(int (*const *)(nvmlDevice_t, unsigned, unsigned *))((const char *)t + 0x7d8);
	for (unsigned mode = 1; mode <= 2; mode++) {
		unsigned daemon = 0xdeadbeef;
		int r = set(dev, mode % 2, &daemon);
		printf("persistence %u: %s, daemon %#x\n", mode % 2, nvmlErrorString(r), daemon);
	}
	nvmlShutdown();
	return 0;
}
