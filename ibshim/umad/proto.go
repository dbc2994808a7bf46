package umad

// The wire protocol between libnvmock-umad.so and the fabric daemon, as
// proto.h defines it for C; TestProtoMatchesHeader keeps the two equal.
// Control messages are little-endian: {Magic, Op, ...}. Everything else on
// the connection is a raw struct ib_user_mad (UMADHeaderSize bytes, then the
// MAD), in both directions.
const (
	SocketEnv     = "NVMOCK_IBD"           // overrides DefaultSocket when set and non-empty
	DefaultSocket = "/run/nvmock/ibd.sock" // AF_UNIX SOCK_SEQPACKET
	// IDSuffix names the file beside the socket where each daemon writes a
	// word of its own (at most IDMax bytes) when it starts: a socket made
	// in place of another can have its inode number and time.
	IDSuffix = ".id"
	IDMax    = 32

	Magic uint32 = 0x4b4d564e // "NVMK" as little-endian bytes

	OpHello       uint32 = 1 // {magic, op, umad_index, pid, kind}, right after connect
	OpRegister    uint32 = 2 // {magic, op, agent_id, qpn, class, class_version, rmpp_version, pad, oui, method_mask[4]}
	OpUnregister  uint32 = 3 // {magic, op, agent_id}
	OpVerbsHello  uint32 = 4 // {magic, op, pid, port, ibdev[64]}; answered {magic, op, qpn_base, lid}
	OpVerbsPkt    uint32 = 5 // a packet between QPs: header (PktSize bytes), then payload
	OpAsyncHello  uint32 = 6 // a verbs hello for a context's async fd; AsyncEventSize-byte events follow
	OpAsyncRaise  uint32 = 7 // {magic, op, event}: the event comes back on the same async fd
	OpVerbsAttach uint32 = 8 // {magic, op, u32 qpn, u16 mlid, u8 attach}: a QP joins (1) or leaves (0) a multicast LID

	AsyncRaiseSize  = 24
	VerbsAttachSize = 15

	AsyncEventSize         = 16 // struct ib_uverbs_async_event_desc: {u64 port, u32 event type, u32 0}, host order
	EventPortActive uint32 = 9  // IBV_EVENT_PORT_ACTIVE
	EventPortErr    uint32 = 10 // IBV_EVENT_PORT_ERR

	KindUMAD uint32 = 0 // /dev/infiniband/umadN
	KindISSM uint32 = 1 // /dev/infiniband/issmN: the port is an SM while it stays connected

	HelloSize      = 20
	RegisterSize   = 40
	UnregisterSize = 12

	VerbsHelloSize   = 80
	VerbsWelcomeSize = 16
	QPNBlock         = 1024  // QPNs per verbs context
	PktSize          = 80    // the packet header
	PktDLIDOffset    = 8     // u16 destination LID
	PktSLIDOffset    = 10    // u16 source LID, which the daemon sets
	PktDQPNOffset    = 12    // u32 destination QPN
	PktSQPNOffset    = 16    // u32 source QPN, which must be the sender's
	PktKindOffset    = 20    // u8 kind
	PktFlagsOffset   = 21    // u8 flags
	PktUDSend        = 6     // the kind of a datagram
	PktMcast         = 32    // flag: a datagram to a group, its destination GID leading the payload
	PktMaxPayload    = 32768 // payload per packet: a message is cut into packets of at most this

	UMADHeaderSize = 64  // struct ib_user_mad with the P_Key index (ABI 5)
	MADSize        = 256 // one MAD; a reassembled RMPP response is longer
	StatusOffset   = 4   // u32 status in the header
	LengthOffset   = 16  // u32 length: header + MAD bytes
	StatusTimedOut = 110 // ETIMEDOUT: the status of an unanswered request
	MaxAgents      = 32  // agent ids per connection, 0..31, lowest free first
)
