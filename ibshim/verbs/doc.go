// Package verbs holds nvmock's kernel-less libibverbs provider
// (libnvmock-rdmav34.so, built from provider.c by build.sh), which lets the
// unmodified ibv_devices and ibv_devinfo [-v] see the mock InfiniBand HCAs
// that nvmock renders in sysfs, with no kernel RDMA stack and no LD_PRELOAD.
// Its Go side is only the integration test that runs those real tools
// against the fixture in testdata.
package verbs
