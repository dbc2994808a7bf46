package profile

import (
	"errors"
	"strings"
	"testing"
)

// An adapter's key is a device id however it is spelt: "0x01021" is the
// NICs' 0x1021 (QA: a leading zero validated and then crashed the fabric;
// upper case was refused as a missing entry). Two keys of one id are an
// error.
func TestAdapterKeysAreDeviceIDsHoweverSpelt(t *testing.T) {
	for _, key := range []string{"0x01021", "0X1021"} {
		p, err := Builtin("h100")
		if err != nil {
			t.Fatal(err)
		}
		a := p.InfiniBand.Adapters["0x1021"]
		delete(p.InfiniBand.Adapters, "0x1021")
		p.InfiniBand.Adapters[key] = a
		if err := errors.Join(p.Validate()...); err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		n, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range n.IB.HCAs {
			if h.Adapter == nil {
				t.Errorf("key %q: %s has no adapter", key, h.Name)
			}
		}
		p.InfiniBand.Adapters["0x1021"] = a
		if err := errors.Join(p.Validate()...); err == nil || !strings.Contains(err.Error(), "device 0x1021 is already infiniband.adapters") {
			t.Errorf("keys 0x1021 and %q: %v, want one refused", key, err)
		}
	}
}

// A ConnectX function is InfiniBand or Ethernet; another network class
// (QA: 0x028000 became a RoCE device that lspci calls a network
// controller) is refused.
func TestAConnectXFunctionIsInfiniBandOrEthernet(t *testing.T) {
	p, err := Builtin("h100")
	if err != nil {
		t.Fatal(err)
	}
	p.PCIe.NICs[0].Class = "0x028000"
	if err := errors.Join(p.Validate()...); err == nil || !strings.Contains(err.Error(), "pcie.nics[0].class: 0x028000: a ConnectX function is InfiniBand (0x020700) or Ethernet (0x020000)") {
		t.Errorf("class 0x028000: %v", err)
	}
}
