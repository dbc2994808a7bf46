// Package verbs holds nvmock's kernel-less libibverbs provider
// (libnvmock-rdmav34.so, built by build.sh from provider.c, which answers
// queries, and the data path of datapath.h, whose RC and UD queue pairs
// move data through the fabric daemon). It lets unmodified verbs programs
// (ibv_devinfo, ibv_rc_pingpong, perftest) use the mock InfiniBand HCAs
// nvmock renders in sysfs, with no kernel RDMA stack and no LD_PRELOAD. Its
// Go side is the integration test that runs the query tools against the
// fixture in testdata; the data path is tested in ibshim.
package verbs
