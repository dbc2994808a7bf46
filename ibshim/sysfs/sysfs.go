package sysfs

import (
	"fmt"
	"path"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// ABI versions the kernel reports: umad 5 (with P_Key index), uverbs 6;
// mlx5's provider ABI is 1.
const (
	madABI      = "5"
	verbsABI    = "6"
	providerABI = "1"
	// GIDs and P_Keys per port, as mlx5 has them: 8 and 128 on InfiniBand,
	// 255 and 1 on Ethernet.
	ibGIDs, ibPKeys   = 8, 128
	ethGIDs, ethPKeys = 255, 1
	ethCapMask        = 0x00010000
	inertDevNode      = "1:3" // the nodes are /dev/null's (DevNodes)
)

// DevNode is one node of /dev/infiniband.
type DevNode struct{ Name string }

// DevNodes lists /dev/infiniband of the node: umadN and issmN per port,
// uverbsN per device, and rdma_cm.
func DevNodes(n *profile.Node) []DevNode {
	var out []DevNode
	for i := range n.IB.HCAs {
		out = append(out, DevNode{fmt.Sprintf("umad%d", i)}, DevNode{fmt.Sprintf("issm%d", i)}, DevNode{fmt.Sprintf("uverbs%d", i)})
	}
	return append(out, DevNode{"rdma_cm"})
}

// Files lists the node's RDMA devices in sysfs, relative to its root.
// Device i is umad i and uverbs i, as the kernel numbers them.
func Files(n *profile.Node, f *fabric.Fabric) []pcisim.File {
	r := &renderer{}
	r.file("class/infiniband_mad/abi_version", madABI)
	r.file("class/infiniband_verbs/abi_version", verbsABI)
	for i := range n.IB.HCAs {
		h := &n.IB.HCAs[i]
		r.hca(i, h, n.IB.HCAs, f, f.Find(h.Name))
	}
	return r.out
}

// LivePorts lists the ports directories of the node's InfiniBand HCAs,
// relative to a live directory: <hca>/ports/..., as Files renders them
// under each HCA. The runtime hook and nvmock exec show them over those,
// so that a fault set while containers run reaches their sysfs. Without
// tables they leave out the GID, GID attribute and P_Key tables (most of
// their files), which never change: the caller shows the tree's there
// (Tables).
func LivePorts(n *profile.Node, f *fabric.Fabric, tables bool) []pcisim.File {
	r := &renderer{noTables: !tables}
	for i := range n.IB.HCAs {
		h := &n.IB.HCAs[i]
		if nd := f.Find(h.Name); nd != nil {
			r.ports(h.Name+"/ports", h, nd, nd.GUID)
		}
	}
	return r.out
}

// Tables are the directories of a port that LivePorts leaves out without
// tables, relative to the port's.
var Tables = []string{"gids", "gid_attrs", "pkeys"}

// PortState lists what a fault changes of InfiniBand HCA hca's port, as
// LivePorts places it: state, rates, LIDs and counters.
func PortState(n *profile.Node, f *fabric.Fabric, hca string) []pcisim.File {
	r := &renderer{}
	for i := range n.IB.HCAs {
		h := &n.IB.HCAs[i]
		if nd := f.Find(h.Name); nd != nil && h.Name == hca {
			r.state(h.Name+"/ports/1", h.Adapter, nd)
		}
	}
	return r.out
}

type renderer struct {
	out      []pcisim.File
	noTables bool // LivePorts without tables
}

func (r *renderer) file(rel, content string) {
	r.out = append(r.out, pcisim.File{Path: rel, Data: []byte(content + "\n")})
}

func (r *renderer) link(rel, target string) {
	to := relTo(path.Dir(rel), target)
	r.out = append(r.out, pcisim.File{Path: rel, Link: to})
}

// relTo is target relative to dir, both relative to the sysfs root.
func relTo(dir, target string) string {
	up := ""
	for d := dir; d != "." && d != ""; d = path.Dir(d) {
		up += "../"
	}
	return up + target
}

// hca renders one device; nd is its CA in the fabric (nil: Ethernet).
func (r *renderer) hca(i int, h *profile.HCA, hcas []profile.HCA, f *fabric.Fabric, nd *fabric.Node) {
	pci := pcisim.DevicePath(h.Function)
	dir := pci + "/infiniband/" + h.Name
	a := h.Adapter
	node, sys := fabric.CardGUIDs(f.Name, hcas, h, f.Local)
	port0 := node // GID 0: an InfiniBand port's GUID
	if nd == nil {
		// A RoCE port's: its MAC's EUI-64 (OUI, ff:fe, the MAC's low 24
		// bits); the MAC follows from the function's place.
		fn := h.Function.Address
		mac := (fn.Domain&0xff)<<16 | fn.Bus<<8 | fn.Device<<3 | fn.Function
		port0 = uint64(a.OUI)<<40 | 0xfffe<<24 | uint64(mac&0xffffff)
	}
	r.file(dir+"/node_type", "1: CA")
	r.file(dir+"/node_guid", guidText(node))
	r.file(dir+"/sys_image_guid", guidText(sys))
	r.file(dir+"/fw_ver", a.FWVersion)
	// mlx5 prints the PCI revision in bare hex: ibstat's "Hardware version: 0".
	r.file(dir+"/hw_rev", fmt.Sprintf("%x", h.Function.Revision))
	r.file(dir+"/hca_type", a.HCAType)
	r.file(dir+"/board_id", a.BoardID)
	// rdma-ndd writes "host device" to every RDMA device, RoCE ones too.
	desc := h.Name
	if nd != nil {
		desc = nd.Desc
	} else if f.Local >= 0 && f.Local < len(f.Hosts) {
		desc = fabric.CADesc(f.Hosts[f.Local], h.Name)
	}
	r.file(dir+"/node_desc", desc)
	r.file(dir+"/uevent", "NAME="+h.Name)
	r.link(dir+"/device", pci)
	r.link(dir+"/subsystem", "class/infiniband")
	r.link("class/infiniband/"+h.Name, dir)

	r.ports(dir+"/ports", h, nd, port0)

	for _, mad := range []string{"umad", "issm"} {
		name := fmt.Sprintf("%s%d", mad, i)
		d := pci + "/infiniband_mad/" + name
		r.file(d+"/ibdev", h.Name)
		r.file(d+"/port", "1")
		r.file(d+"/dev", inertDevNode)
		r.link(d+"/device", pci)
		r.link("class/infiniband_mad/"+name, d)
	}
	v := fmt.Sprintf("%s/infiniband_verbs/uverbs%d", pci, i)
	r.file(v+"/ibdev", h.Name)
	r.file(v+"/abi_version", providerABI)
	r.file(v+"/dev", inertDevNode)
	r.link(v+"/device", pci)
	r.link(fmt.Sprintf("class/infiniband_verbs/uverbs%d", i), v)
}

// ports renders an HCA's ports directory (its one port, 1).
func (r *renderer) ports(dir string, h *profile.HCA, nd *fabric.Node, port0 uint64) {
	port := dir + "/1"
	r.state(port, h.Adapter, nd)
	r.traffic(port)
	r.file(port+"/lid_mask_count", "0")
	r.file(port+"/sm_sl", "0")
	if nd != nil {
		r.file(port+"/cap_mask", fmt.Sprintf("0x%08x", nd.CapMask()))
		r.file(port+"/link_layer", "InfiniBand")
	} else {
		r.file(port+"/lid", "0x0")
		r.file(port+"/sm_lid", "0x0")
		r.file(port+"/cap_mask", fmt.Sprintf("0x%08x", ethCapMask))
		r.file(port+"/link_layer", "Ethernet")
		r.counters(port, nil)
	}
	if r.noTables {
		return
	}
	gids, pkeys := ibGIDs, ibPKeys
	if nd == nil {
		gids, pkeys = ethGIDs, ethPKeys
	}
	for k := 0; k < gids; k++ {
		gid := "0000:0000:0000:0000:0000:0000:0000:0000"
		if k == 0 {
			gid = "fe80:0000:0000:0000:" + guidText(port0)
		}
		r.file(fmt.Sprintf("%s/gids/%d", port, k), gid)
		typ := "IB/RoCE v1"
		if nd == nil && k == 1 {
			typ = "RoCE v2"
		}
		r.file(fmt.Sprintf("%s/gid_attrs/types/%d", port, k), typ)
		// No netdev behind any GID: the namespace's own interfaces are
		// not the HCA's.
		r.out = append(r.out, pcisim.File{Path: fmt.Sprintf("%s/gid_attrs/ndevs/%d", port, k)})
	}
	for k := 0; k < pkeys; k++ {
		pkey := "0x0000"
		if k == 0 {
			pkey = "0xffff"
		}
		r.file(fmt.Sprintf("%s/pkeys/%d", port, k), pkey)
	}
}

// state renders what a port fault changes of an InfiniBand port (nd its
// CA; nil: an Ethernet port, whose state is only the link's).
func (r *renderer) state(port string, a *profile.IBAdapter, nd *fabric.Node) {
	state, phys := "4: ACTIVE", "5: LinkUp"
	speed := a.Speed
	if nd != nil { // as the link trained: the slower end's
		speed = nd.Ports[1].ActiveSpeed()
	}
	rate := fmt.Sprintf("%d Gb/sec (4X %s)", speed.Gbps(), speed)
	if nd == nil {
		r.file(port+"/state", state)
		r.file(port+"/phys_state", phys)
		r.file(port+"/rate", rate)
		return
	}
	p := nd.Ports[1]
	sm := nd.Subnet.SM.LID
	if p.Down() {
		// As a real ConnectX port with its cable out: ibstat's "Rate: 10".
		state, phys, rate, sm = "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)", 0
	}
	r.file(port+"/state", state)
	r.file(port+"/phys_state", phys)
	r.file(port+"/rate", rate)
	r.file(port+"/lid", fmt.Sprintf("0x%x", p.LID))
	r.file(port+"/sm_lid", fmt.Sprintf("0x%x", sm))
	r.counters(port, p.Errors)
}

// counters renders a port's PMA error counters as mlx5 shows them: those
// a fault set, else 0.
func (r *renderer) counters(port string, errs map[string]uint64) {
	for _, c := range fabric.ErrorCounters {
		r.file(port+"/counters/"+c.Name, fmt.Sprint(errs[c.Name]))
	}
}

// traffic renders a port's PMA traffic counters at 0. The fabric daemon
// replaces a node's live ones as MADs cross its ports (ibd's
// showCounters); a fault leaves them alone.
func (r *renderer) traffic(port string) {
	for _, k := range trafficCounters {
		r.file(port+"/counters/"+k, "0")
	}
}

// trafficCounters are the PMA data and packet counters of ports/N/counters.
var trafficCounters = []string{
	"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait",
	"unicast_xmit_packets", "unicast_rcv_packets", "multicast_xmit_packets", "multicast_rcv_packets",
}

// guidText is a GUID as sysfs spells it: "a088:c203:0045:1a2c".
func guidText(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}
