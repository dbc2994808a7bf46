// Package fabric builds a node's InfiniBand fabric from its profile: the
// node's HCAs, the modelled nodes beside it, and the rail-optimized leaf and
// spine switches cabling them, with GUIDs, LIDs, names and forwarding
// tables derived from the fabric's name, so that every node of a cluster
// builds the same fabric.
package fabric
