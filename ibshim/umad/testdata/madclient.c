/*
 * madclient: a umad client written against the kernel's uapi
 * (rdma/ib_user_mad.h), not libibumad, for what the real tools do not show.
 *
 *   madclient fork  a round trip, then one in a forked child, then one more
 *                   in the parent: the connection survives fork.
 *   madclient gone  a round trip; a request (TID 0xdead) the daemon answers
 *                   by hanging up; then a request that must come back as the
 *                   kernel returns an unanswered one (status 110).
 *   madclient restart  a round trip; "stop" and a line on stdin (the
 *                   daemon is gone then): a request that times out; "start"
 *                   and a line (a new daemon listens): a round trip on the
 *                   same fd.
 *   madclient late  no daemon at open: a request, then "start" and a line
 *                   (a daemon listens now): the request still comes back
 *                   timed out, then a round trip through the daemon.
 *   madclient intr  no daemon, a blocking device: a read that a signal
 *                   interrupts returns EINTR, as the kernel's does.
 *
 * It prints one line per step and exits 0 when every step went as expected.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <endian.h>
#include <rdma/ib_user_mad.h>
#include <rdma/rdma_user_ioctl.h>

static int fd;
static uint32_t agent;

/* request sends a LID-routed SMP Get NodeInfo with this TID: 0, or -2. */
static int request(uint64_t tid)
{
	uint8_t buf[64 + 256];
	struct ib_user_mad *u = (void *)buf;
	uint8_t *mad = buf + 64;
	uint64_t be = htobe64(tid);

	memset(buf, 0, sizeof buf);
	u->hdr.id = agent;
	u->hdr.timeout_ms = 100;
	u->hdr.lid = htobe16(1);
	mad[0] = 1, mad[1] = 0x01, mad[2] = 1, mad[3] = 0x01; /* SMP Get */
	memcpy(mad + 8, &be, 8);
	mad[16] = 0x00, mad[17] = 0x11; /* NodeInfo */
	if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
		perror("write");
		return -2;
	}
	return 0;
}

/* answer waits for what comes back for TID tid and returns its status,
 * -1 for nothing, -2 for an error. */
static int answer(uint64_t tid, ssize_t *len)
{
	uint8_t in[64 + 256];
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t be = htobe64(tid);

	if (poll(&p, 1, 2000) != 1)
		return -1;
	*len = read(fd, in, sizeof in);
	if (*len < 0 && errno == EAGAIN) {
		*len = 0; /* woken by a hangup: nothing to read */
		return -1;
	}
	if (*len < 0)
		return -2;
	/* Only the TID's low half: the kernel puts the agent's number in
	 * the high half (ib_umad_write). */
	if (*len < 64 + 24 || memcmp(in + 64 + 12, (uint8_t *)&be + 4, 4) != 0) {
		fprintf(stderr, "tid %#llx: bad answer (%zd bytes)\n", (unsigned long long)tid, *len);
		return -2;
	}
	return (int)((struct ib_user_mad *)in)->hdr.status;
}

/* roundtrip is a request and its answer. */
static int roundtrip(uint64_t tid, ssize_t *len)
{
	return request(tid) < 0 ? -2 : answer(tid, len);
}

static void on_alarm(int sig) { (void)sig; }

/* step says what it waits for and waits for a line on stdin. */
static void step(const char *what)
{
	char line[16];

	printf("%s\n", what);
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		_exit(3);
}

static int expect(const char *who, uint64_t tid, int want)
{
	ssize_t len = 0;
	int st = roundtrip(tid, &len);

	printf("%s %#llx: status %d, %zd bytes\n", who, (unsigned long long)tid, st, len);
	fflush(stdout);
	return st == want ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct ib_user_mad_reg_req req;
	int bad = 0;

	if (argc != 2)
		return 2;
	fd = open("/dev/infiniband/umad0", strcmp(argv[1], "intr") == 0 ? O_RDWR : O_RDWR | O_NONBLOCK);
	if (fd < 0 || ioctl(fd, IB_USER_MAD_ENABLE_PKEY, NULL) != 0) {
		perror("open umad0");
		return 1;
	}
	memset(&req, 0, sizeof req);
	req.qpn = 0;
	req.mgmt_class = 0x01;
	req.mgmt_class_version = 1;
	req.id = 99;
	if (ioctl(fd, IB_USER_MAD_REGISTER_AGENT, &req) != 0) {
		perror("register");
		return 1;
	}
	agent = req.id;
	printf("agent %u\n", agent);
	if (strcmp(argv[1], "fork") == 0) {
		int ws;
		pid_t pid;

		bad |= expect("parent", 1, 0);
		pid = fork();
		if (pid == 0)
			_exit(expect("child", 2, 0));
		if (pid < 0 || waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			bad = 1;
		bad |= expect("parent", 3, 0);
	} else if (strcmp(argv[1], "gone") == 0) {
		bad |= expect("live", 1, 0);
		bad |= expect("hangup", 0xdead, -1);
		bad |= expect("dead", 3, 110);
	} else if (strcmp(argv[1], "restart") == 0) {
		bad |= expect("live", 1, 0);
		step("stop");
		bad |= expect("dead", 2, 110);
		step("start");
		bad |= expect("back", 3, 0);
	} else if (strcmp(argv[1], "late") == 0) {
		ssize_t len = 0;
		int st;
		bad |= request(1) != 0;
		step("start");
		st = answer(1, &len);
		printf("queued 0x1: status %d, %zd bytes\n", st, len);
		bad |= st != 110;
		bad |= expect("back", 2, 0);
	} else if (strcmp(argv[1], "intr") == 0) {
		struct sigaction sa;
		uint8_t in[64 + 256];
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_alarm; /* no SA_RESTART */
		sigaction(SIGALRM, &sa, NULL);
		alarm(1);
		ssize_t n = read(fd, in, sizeof in);
		printf("read: %zd, %s\n", n, n < 0 && errno == EINTR ? "EINTR" : "not EINTR");
		bad |= !(n < 0 && errno == EINTR);
	} else if (strcmp(argv[1], "big") == 0) {
		/* More than one MAD that is not an RMPP transfer: the kernel's
		 * write says EINVAL. */
		static uint8_t out[64 + 4096];
		struct ib_user_mad *u = (struct ib_user_mad *)out;
		u->hdr.id = agent;
		ssize_t n = write(fd, out, sizeof out);
		printf("write: %zd, %s\n", n, n < 0 && errno == EINVAL ? "EINVAL" : "not EINVAL");
		bad |= !(n < 0 && errno == EINVAL);
	} else {
		return 2;
	}
	if (ioctl(fd, IB_USER_MAD_UNREGISTER_AGENT, &agent) != 0) {
		perror("unregister");
		bad = 1;
	}
	close(fd);
	return bad;
}
