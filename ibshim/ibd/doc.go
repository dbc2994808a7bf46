// Package ibd is the node's fabric daemon: it answers the MADs that the
// umad shim hands it from /dev/infiniband/umadN as the fabric's agents
// would (subnet management agents, the subnet administrator, performance
// management, vendor agents such as ibping's), and passes MADs between
// agents registered by the node's programs.
package ibd
