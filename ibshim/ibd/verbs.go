package ibd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"time"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/umad"
)

// The verbs data path. A provider context (ibshim/verbs) that creates a QP
// connects, names its HCA and port, and gets a block of QP numbers there;
// then it sends packets, which the daemon hands to the context holding the
// destination QPN at the destination LID: on this node, or through the
// daemon of the real node whose LID it is. A packet with nowhere to go (a
// modelled node, a port that is down, a QP that is gone) is dropped: the
// requester's timeout and retries decide, as on a fabric.

// frameVerbs carries a packet between daemons: u8 subnet index, then the
// packet as the provider sent it (its source LID set).
const frameVerbs = 4

// dataWait bounds how long a packet waits for a program or peer too busy to
// take it; then it is lost, and the requester sends it again.
const dataWait = 2 * time.Second

type qpnBlock struct {
	port  *fabric.Port
	block uint32
}

// verbsHello registers a context and answers with its QPN block and LID;
// a block of 0 says the fabric has no such InfiniBand port.
func (d *Daemon) verbsHello(c *conn, msg []byte) {
	le := binary.LittleEndian
	w := make([]byte, umad.VerbsWelcomeSize)
	le.PutUint32(w, umad.Magic)
	le.PutUint32(w[4:], umad.OpVerbsHello)
	if len(msg) >= umad.VerbsHelloSize && le.Uint32(msg[12:]) == 1 {
		name, _, _ := bytes.Cut(msg[16:umad.VerbsHelloSize], []byte{0})
		d.mu.Lock()
		for p, n := range d.hcas {
			if n == string(name) && c.verbsPort == nil {
				for b := uint32(1); b < 1<<24/umad.QPNBlock; b++ {
					if d.qpns[qpnBlock{p, b}] == nil {
						d.qpns[qpnBlock{p, b}] = c
						c.verbsPort, c.block = p, b
						break
					}
				}
			}
		}
		if c.verbsPort != nil {
			le.PutUint32(w[8:], c.block*umad.QPNBlock)
			le.PutUint32(w[12:], uint32(c.verbsPort.LID))
		}
		d.mu.Unlock()
	}
	d.queue(c, w)
}

// verbsPacket routes a packet a context sent.
func (d *Daemon) verbsPacket(c *conn, msg []byte) {
	if len(msg) < umad.PktSize {
		return
	}
	le := binary.LittleEndian
	d.mu.Lock()
	from := c.verbsPort
	if from == nil {
		d.mu.Unlock()
		return
	}
	le.PutUint16(msg[umad.PktSLIDOffset:], from.LID)
	if dlid := le.Uint16(msg[umad.PktDLIDOffset:]); dlid >= mlidBase && dlid <= mlidTop {
		d.mcPacket(c, from, dlid, msg) // unlocks mu
		return
	}
	to := from.Node.Subnet.Port(le.Uint16(msg[umad.PktDLIDOffset:]))
	// A context speaks only for its own QPs.
	if to == nil || from.Down() || to.Down() || le.Uint32(msg[umad.PktSQPNOffset:])/umad.QPNBlock != c.block {
		d.mu.Unlock()
		return
	}
	var dst *conn
	var p *peer
	idx := 0
	if to.Node.Slot == d.fab.Local {
		dst = d.qpns[qpnBlock{to, le.Uint32(msg[umad.PktDQPNOffset:]) / umad.QPNBlock}]
	} else if to.Node.Type == fabric.CA {
		p = d.peers[to.Node.Slot]
		idx = d.subnetIndex(from.Node.Subnet)
	}
	if dst != nil || p != nil {
		d.countData(from, to, len(msg)-umad.PktSize)
	}
	d.mu.Unlock()
	switch {
	case dst != nil:
		dst.sendData(msg)
	case p != nil:
		p.sendWait(frameVerbs, []byte{byte(idx)}, msg)
	}
}

// verbsFromPeer delivers a packet another node's daemon relayed.
func (d *Daemon) verbsFromPeer(body []byte) {
	// No provider sends, or takes, more than one packet's payload (review:
	// 1 MiB packets queued for a program that did not read held 1 GB).
	if len(body) < 1+umad.PktSize || len(body) > 1+umad.PktSize+umad.PktMaxPayload || int(body[0]) >= len(d.fab.Subnets) {
		return
	}
	le := binary.LittleEndian
	msg := body[1:]
	d.mu.Lock()
	s := d.fab.Subnets[body[0]]
	if dlid := le.Uint16(msg[umad.PktDLIDOffset:]); dlid >= mlidBase && dlid <= mlidTop {
		var ts []mcAttach
		if s.Port(le.Uint16(msg[umad.PktSLIDOffset:])) != nil {
			ts = d.mcTargets(s, dlid, msg)
			d.countIn(ts, len(msg)-umad.PktSize)
		}
		d.mu.Unlock()
		for _, t := range ts {
			t.c.fromPeer(addressed(msg, t.qpn))
		}
		return
	}
	src, dst := s.Port(le.Uint16(msg[umad.PktSLIDOffset:])), s.Port(le.Uint16(msg[umad.PktDLIDOffset:]))
	var c *conn
	if src != nil && dst != nil && dst.Node.Slot == d.fab.Local && !dst.Down() {
		c = d.qpns[qpnBlock{dst, le.Uint32(msg[umad.PktDQPNOffset:]) / umad.QPNBlock}]
		if c != nil {
			d.countData(src, dst, len(msg)-umad.PktSize)
		}
	}
	d.mu.Unlock()
	if c != nil {
		c.fromPeer(msg)
	}
}

// peerInQueue bounds the packets from other nodes waiting for one program.
const peerInQueue = 1024

// fromPeer hands a relayed packet to the program's own writer, so that a
// slow program does not hold up the link it came by (and the MADs behind
// it) while its queue has room. A full queue holds the link for up to
// dataWait, as credits hold a real link, before it loses the packet: data
// has backpressure (sendWait), and a UC or UD message lost to a program
// that was only slow is lost for good (perftest's UC test then hung).
func (c *conn) fromPeer(msg []byte) {
	c.peerOnce.Do(func() {
		c.peerIn = make(chan []byte, peerInQueue)
		go func() {
			for {
				select {
				case b := <-c.peerIn:
					if err := c.sendData(b); errors.Is(err, net.ErrClosed) {
						return // the program is gone; what is queued is lost
					}
				case <-c.gone:
					return
				}
			}
		}()
	})
	select {
	case c.peerIn <- msg:
		return
	default:
	}
	t := time.NewTimer(dataWait)
	defer t.Stop()
	select {
	case c.peerIn <- msg:
	case <-c.gone:
	case <-t.C:
	}
}

// sendData writes a packet, waiting at most dataWait for room; one not
// taken is lost, as on a congested link.
func (c *conn) sendData(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.uc.SetWriteDeadline(time.Now().Add(dataWait))
	_, err := c.uc.Write(b)
	c.uc.SetWriteDeadline(time.Time{})
	return err
}
