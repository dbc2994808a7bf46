// Identities of the built-in default, derived at init exactly as the Go
// compiler derives them (libnvml/snapshot/identity.go): FNV-1a over the node
// seed, the profile name, the GPU index and a salt, parts split by a 0 byte,
// then MurmurHash3's 64-bit finalizer.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "nvmock.h"

static uint64_t fnv64a(const char *const *parts, int n)
{
	uint64_t h = 14695981039346656037ull;
	for (int i = 0; i < n; i++) {
		if (i > 0)
			h *= 1099511628211ull; // the 0 separator: h ^= 0
		for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++) {
			h ^= *p;
			h *= 1099511628211ull;
		}
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 33;
	return h;
}

// nvmock_pdi is a GPU's per-device identifier, fused into a real chip:
// here a hash of its UUID, so it is as unique and as stable as the UUID.
uint64_t nvmock_pdi(const char *uuid)
{
	const char *p[] = {uuid, "pdi"};
	return fnv64a(p, 2);
}

void nvmock_derive_identity(const char *profile, const char *seed, unsigned index,
			    const char *serial_prefix, char uuid[96], char serial[32])
{
	char idx[16];
	snprintf(idx, sizeof idx, "%u", index);
	const char *pa[] = {seed, profile, idx, "uuid-a"};
	const char *pb[] = {seed, profile, idx, "uuid-b"};
	const char *ps[] = {seed, profile, idx, "serial"};
	uint64_t a = fnv64a(pa, 4), b = fnv64a(pb, 4);
	snprintf(uuid, 96, "GPU-%08llx-%04llx-%04llx-%04llx-%012llx",
		 (unsigned long long)(a >> 32), (unsigned long long)((a >> 16) & 0xffff),
		 (unsigned long long)(a & 0xffff), (unsigned long long)(b >> 48),
		 (unsigned long long)(b & 0xffffffffffffull));
	int digits = 13 - (int)strnlen(serial_prefix, 13);
	if (digits <= 0) {
		snprintf(serial, 32, "%s", serial_prefix);
		return;
	}
	uint64_t mod = 1;
	for (int k = 0; k < digits; k++)
		mod *= 10;
	// Fill the digits from the right: prefix + zero-padded hash, 13 in all.
	size_t plen = 13 - (size_t)digits;
	memcpy(serial, serial_prefix, plen);
	uint64_t v = fnv64a(ps, 4) % mod;
	for (int k = 12; k >= (int)plen; k--, v /= 10)
		serial[k] = (char)('0' + v % 10);
	serial[13] = '\0';
}
