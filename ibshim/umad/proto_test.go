package umad

import (
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestProtoMatchesHeader compares proto.go with the C side, proto.h.
func TestProtoMatchesHeader(t *testing.T) {
	src, err := os.ReadFile("proto.h")
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define (NVMOCK_\w+) (.+?)\s*(?:/\*.*)?$`).FindAllStringSubmatch(string(src), -1) {
		defs[m[1]] = m[2]
	}
	num := func(name string) uint64 {
		v, ok := defs[name]
		if !ok {
			t.Fatalf("proto.h: no #define %s", name)
		}
		n, err := strconv.ParseUint(regexp.MustCompile(`u$`).ReplaceAllString(v, ""), 0, 32)
		if err != nil {
			t.Fatalf("proto.h: %s: %v", name, err)
		}
		return n
	}
	str := func(name string) string {
		s, err := strconv.Unquote(defs[name])
		if err != nil {
			t.Fatalf("proto.h: %s: %v", name, err)
		}
		return s
	}
	for _, c := range []struct {
		name string
		got  uint64
	}{
		{"NVMOCK_IBD_MAGIC", uint64(Magic)},
		{"NVMOCK_IBD_OP_HELLO", uint64(OpHello)},
		{"NVMOCK_IBD_OP_REGISTER", uint64(OpRegister)},
		{"NVMOCK_IBD_OP_UNREGISTER", uint64(OpUnregister)},
		{"NVMOCK_IBD_KIND_UMAD", uint64(KindUMAD)},
		{"NVMOCK_IBD_KIND_ISSM", uint64(KindISSM)},
		{"NVMOCK_IBD_HELLO_SIZE", HelloSize},
		{"NVMOCK_IBD_REGISTER_SIZE", RegisterSize},
		{"NVMOCK_IBD_UNREGISTER_SIZE", UnregisterSize},
		{"NVMOCK_IBD_OP_VERBS_HELLO", uint64(OpVerbsHello)},
		{"NVMOCK_IBD_OP_VERBS_PKT", uint64(OpVerbsPkt)},
		{"NVMOCK_IBD_OP_ASYNC_HELLO", uint64(OpAsyncHello)},
		{"NVMOCK_IBD_ASYNC_EVENT_SIZE", AsyncEventSize},
		{"NVMOCK_IBD_OP_ASYNC_RAISE", uint64(OpAsyncRaise)},
		{"NVMOCK_IBD_OP_VERBS_ATTACH", uint64(OpVerbsAttach)},
		{"NVMOCK_IBD_VERBS_ATTACH_SIZE", VerbsAttachSize},
		{"NVMOCK_IBD_ASYNC_RAISE_SIZE", AsyncRaiseSize},
		{"NVMOCK_IBD_EVENT_PORT_ACTIVE", uint64(EventPortActive)},
		{"NVMOCK_IBD_EVENT_PORT_ERR", uint64(EventPortErr)},
		{"NVMOCK_IBD_VERBS_HELLO_SIZE", VerbsHelloSize},
		{"NVMOCK_IBD_VERBS_WELCOME_SIZE", VerbsWelcomeSize},
		{"NVMOCK_IBD_ID_MAX", IDMax},
		{"NVMOCK_IBD_QPN_BLOCK", QPNBlock},
		{"NVMOCK_IBD_PKT_SIZE", PktSize},
		{"NVMOCK_IBD_PKT_DLID_OFF", PktDLIDOffset},
		{"NVMOCK_IBD_PKT_SLID_OFF", PktSLIDOffset},
		{"NVMOCK_IBD_PKT_DQPN_OFF", PktDQPNOffset},
		{"NVMOCK_IBD_PKT_SQPN_OFF", PktSQPNOffset},
		{"NVMOCK_IBD_PKT_KIND_OFF", PktKindOffset},
		{"NVMOCK_PKT_UD_SEND", PktUDSend},
		{"NVMOCK_IBD_PKT_FLAGS_OFF", PktFlagsOffset},
		{"NVMOCK_PKT_MCAST", PktMcast},
		{"NVMOCK_PKT_MAX_PAYLOAD", PktMaxPayload},
		{"NVMOCK_UMAD_HDR_SIZE", UMADHeaderSize},
		{"NVMOCK_UMAD_MAD_SIZE", MADSize},
		{"NVMOCK_UMAD_STATUS_OFF", StatusOffset},
		{"NVMOCK_UMAD_LENGTH_OFF", LengthOffset},
		{"NVMOCK_UMAD_ETIMEDOUT", StatusTimedOut},
		{"NVMOCK_UMAD_MAX_AGENTS", MaxAgents},
	} {
		if want := num(c.name); c.got != want {
			t.Errorf("%s: proto.go has %#x, proto.h %#x", c.name, c.got, want)
		}
	}
	if got, want := SocketEnv, str("NVMOCK_IBD_ENV"); got != want {
		t.Errorf("SocketEnv %q, proto.h %q", got, want)
	}
	if got, want := IDSuffix, str("NVMOCK_IBD_ID_SUFFIX"); got != want {
		t.Errorf("IDSuffix %q, proto.h %q", got, want)
	}
	if got, want := DefaultSocket, str("NVMOCK_IBD_SOCKET"); got != want {
		t.Errorf("DefaultSocket %q, proto.h %q", got, want)
	}
}
