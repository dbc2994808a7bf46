//go:build ignore

// nvidia-imex and nvidia-imex-ctl for mock NVL72 nodes: the IMEX daemon of
// a multi-node NVLink domain, as NVIDIA's DRA driver runs it (a child of
// its compute-domain daemon, in that pod), and the control tool that
// driver probes it with (nvidia-imex-ctl -c CONFIG -q, which must print
// READY). One static binary, named by argv[0]: it runs in other people's
// images, whatever their libc. Only the local daemon's readiness is
// modelled: the daemons do not talk to each other, so there is no domain
// status (-N) and no memory export.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_CONFIG "/etc/nvidia-imex/config.cfg"
#define DEFAULT_NODES "/etc/nvidia-imex/nodes_config.cfg"
#define CTL_MS 3000 // how long nvidia-imex-ctl waits for each step

// An address as the config gives it: IPv4 or IPv6 (the DRA driver puts
// its pod's IP in IMEX_CMD_BIND_INTERFACE_IP, IPv6 in an IPv6 cluster), or
// none (family 0): any interface.
struct addr {
	int family;
	union {
		struct in_addr v4;
		struct in6_addr v6;
	};
};

struct config {
	char path[4096];
	char nodes[4096];    // IMEX_NODE_CONFIG_FILE
	struct addr bind_ip; // BIND_INTERFACE_IP: the peers' port
	int server_port;     // SERVER_PORT
	int cmd_enabled;     // IMEX_CMD_ENABLED
	struct addr cmd_ip;  // IMEX_CMD_BIND_INTERFACE_IP
	int cmd_port;        // IMEX_CMD_PORT
	char cmd_unix[108];  // IMEX_CMD_UNIX_DOMAIN_PATH
	char log_file[4096]; // LOG_FILE_NAME; empty: stderr
	int daemonize;       // DAEMONIZE: 1, NVIDIA's default, detaches once ready
};

static const char *prog = "nvidia-imex";
static FILE *logf;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static void logline(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(logf, fmt, ap);
	fputc('\n', logf);
	fflush(logf);
	va_end(ap);
}

// copy copies a value that must fit: what names it (the key and its
// file, or a flag) goes into the error.
static void copy(char *dst, size_t n, const char *src, const char *what)
{
	if (strlen(src) >= n)
		die("%s: value too long (%zu bytes at most)", what, n - 1);
	strcpy(dst, src);
}

// port reads digits only (strtol would also take blanks and a sign), from
// min to 65535.
static int port(const char *what, const char *v, long min)
{
	long p = 0;
	for (const char *d = v; *d >= '0' && *d <= '9' && p <= 65535; d++)
		p = p * 10 + (*d - '0');
	if (v[strspn(v, "0123456789")] != '\0' || p < min || p > 65535)
		die("%s: %.80s is not a port (%ld to 65535)", what, v, min);
	return (int)p;
}

// ip reads an IPv4 or IPv6 address; empty is none (any interface).
static struct addr ip(const char *what, const char *v)
{
	struct addr a = {0};
	if (*v == '\0')
		return a;
	if (inet_pton(AF_INET, v, &a.v4) == 1)
		a.family = AF_INET;
	else if (inet_pton(AF_INET6, v, &a.v6) == 1)
		a.family = AF_INET6;
	else
		die("%s: %.80s is not an IPv4 or IPv6 address", what, v);
	return a;
}

// show_ip writes a for the log: none is 0.0.0.0, what it binds.
static const char *show_ip(const struct addr *a, char buf[INET6_ADDRSTRLEN])
{
	if (a->family == 0)
		return "0.0.0.0";
	return inet_ntop(a->family, &a->v4, buf, INET6_ADDRSTRLEN);
}

// sockaddr_of fills sa with a and p; none is any IPv4 interface, or to
// connect, the loopback.
static socklen_t sockaddr_of(const struct addr *a, int p, uint32_t none, struct sockaddr_storage *sa)
{
	memset(sa, 0, sizeof *sa);
	if (a->family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)p);
		s6->sin6_addr = a->v6;
		return sizeof *s6;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)p);
	s4->sin_addr.s_addr = a->family == AF_INET ? a->v4.s_addr : htonl(none);
	return sizeof *s4;
}

// read_config reads KEY=VALUE lines; '#' starts a comment, blanks may lead
// a line and CRLF may end it. Keys it does not model are accepted, as the
// real daemon's many are; of a key given twice the last counts. Anything
// else is refused with the line's number, so a mistyped key is not a
// silent default.
static void read_config(const char *path, struct config *c)
{
	memset(c, 0, sizeof *c);
	copy(c->path, sizeof c->path, path, "-c");
	strcpy(c->nodes, DEFAULT_NODES);
	c->server_port = 50000;
	c->cmd_port = 50005;
	c->daemonize = 1;
	FILE *f = fopen(path, "r");
	if (f == NULL)
		die("config file %s: %s", path, strerror(errno));
	char *line = NULL, what[4200];
	size_t cap = 0;
	ssize_t len;
	for (int n = 1; (len = getline(&line, &cap, f)) >= 0; n++) {
		if (strlen(line) != (size_t)len)
			die("config %s: line %d: a NUL byte", path, n);
		// Only a line's end is cut: a CR inside a value stays in it.
		if (len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (len > 0 && line[len - 1] == '\r')
			line[--len] = '\0';
		char *s = line + strspn(line, " \t");
		if (*s == '#' || *s == '\0')
			continue;
		size_t klen = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_");
		if (s[klen] != '=')
			die("config %s: line %d: %.80s: want KEY=VALUE", path, n, s);
		if (klen == 0)
			die("config %s: line %d: %.80s: no key before '='", path, n, s);
		s[klen] = '\0';
		const char *k = s, *v = s + klen + 1;
		snprintf(what, sizeof what, "config %s: line %d: %s", path, n, k);
		if (strcmp(k, "IMEX_NODE_CONFIG_FILE") == 0 && *v)
			copy(c->nodes, sizeof c->nodes, v, what);
		else if (strcmp(k, "BIND_INTERFACE_IP") == 0)
			c->bind_ip = ip(what, v);
		else if (strcmp(k, "SERVER_PORT") == 0 && *v)
			c->server_port = port(what, v, 0); // 0 to 65535, as NVIDIA documents it
		else if (strcmp(k, "IMEX_CMD_ENABLED") == 0 && strcmp(v, "0") != 0 && strcmp(v, "1") != 0 && *v)
			die("%s: %.80s is not 0 or 1", what, v);
		else if (strcmp(k, "IMEX_CMD_ENABLED") == 0)
			c->cmd_enabled = strcmp(v, "1") == 0;
		else if (strcmp(k, "DAEMONIZE") == 0 && strcmp(v, "0") != 0 && strcmp(v, "1") != 0 && *v)
			die("%s: %.80s is not 0 or 1", what, v);
		else if (strcmp(k, "DAEMONIZE") == 0 && *v)
			c->daemonize = strcmp(v, "1") == 0;
		else if (strcmp(k, "IMEX_CMD_BIND_INTERFACE_IP") == 0)
			c->cmd_ip = ip(what, v);
		else if (strcmp(k, "IMEX_CMD_PORT") == 0 && *v)
			c->cmd_port = port(what, v, 1); // nvidia-imex-ctl connects to it
		else if (strcmp(k, "IMEX_CMD_UNIX_DOMAIN_PATH") == 0)
			copy(c->cmd_unix, sizeof c->cmd_unix, v, what);
		else if (strcmp(k, "LOG_FILE_NAME") == 0)
			copy(c->log_file, sizeof c->log_file, v, what);
	}
	if (ferror(f))
		die("config file %s: %s", path, strerror(errno));
	free(line);
	fclose(f);
}

// count_nodes counts the node config's entries: one address or name a
// line; -1 when it cannot be read.
static int count_nodes(const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	char *line = NULL;
	size_t cap = 0;
	int n = 0;
	while (getline(&line, &cap, f) >= 0) {
		char *s = line + strspn(line, " \t");
		if (*s != '#' && *s != '\r' && *s != '\n' && *s != '\0')
			n++;
	}
	int bad = ferror(f);
	free(line);
	fclose(f);
	return bad ? -1 : n;
}

// listen_tcp listens on a and p; what (the keys) goes into the error.
static int listen_tcp(const char *what, const struct addr *a, int p)
{
	struct sockaddr_storage sa;
	socklen_t n = sockaddr_of(a, p, INADDR_ANY, &sa);
	int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, n) != 0 || listen(fd, 16) != 0) {
		char buf[INET6_ADDRSTRLEN];
		die("config %s: listen on %s port %d: %s", what, show_ip(a, buf), p, strerror(errno));
	}
	return fd;
}

// listen_unix listens on path, replacing a socket a previous run left
// there; anything else at path is refused, not deleted (the daemon runs as
// root in its pod).
static int listen_unix(const char *cfg, const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	copy(a.sun_path, sizeof a.sun_path, path, "IMEX_CMD_UNIX_DOMAIN_PATH");
	struct stat st;
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode))
		die("config %s: IMEX_CMD_UNIX_DOMAIN_PATH: %s exists and is not a socket", cfg, path);
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0)
		die("config %s: IMEX_CMD_UNIX_DOMAIN_PATH: listen on %s: %s", cfg, path, strerror(errno));
	return fd;
}

static volatile sig_atomic_t stop, reload;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		reload = 1;
	else
		stop = 1;
}

// A command connection: its request so far, and when it is given up.
#define MAX_CLIENTS 64
#define CLIENT_MS 2000
struct client {
	int fd;
	size_t got;
	char req[16];
	long long deadline;
};

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

// serve reads what a command connection sent; once it has asked for the
// status it is answered. It returns 1 when the connection is done.
static int serve(struct client *cl)
{
	ssize_t r = read(cl->fd, cl->req + cl->got, sizeof cl->req - 1 - cl->got);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r <= 0)
		return 1; // gone, or an error
	cl->got += (size_t)r;
	if (cl->got < 6 && memchr(cl->req, '\n', cl->got) == NULL && cl->got < sizeof cl->req - 1)
		return 0;
	if (strncmp(cl->req, "status", 6) == 0) {
		const char *ready = "READY\n";
		if (write(cl->fd, ready, strlen(ready)) < 0) {
			// the client went away
		}
	}
	return 1;
}

// drop_oldest closes the client that came first (the nearest deadline).
static void drop_oldest(struct client *cl, int *ncl)
{
	int oldest = 0;
	for (int j = 1; j < *ncl; j++)
		if (cl[j].deadline < cl[oldest].deadline)
			oldest = j;
	close(cl[oldest].fd);
	cl[oldest] = cl[--*ncl];
}

// detach runs the daemon on in the background, as DAEMONIZE=1 asks (NVIDIA's
// default; its DRA driver and containers set 0): the caller gets status 0
// once the daemon listens, and the daemon keeps no terminal, pipe or other
// file of the caller's, only its keep[] descriptors (listening sockets, the
// log file). The working directory stays: the node file's path may be
// relative, and SIGUSR1 reads it again.
static void detach(const int *keep, int nkeep)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		die("daemonize: fork: %s", strerror(errno));
	if (pid > 0)
		_exit(0);
	setsid();
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0)
		die("daemonize: /dev/null: %s", strerror(errno));
	for (int fd = 0; fd <= 2; fd++)
		dup2(null, fd);
	int top = 2;
	for (int k = 0; k < nkeep; k++)
		top = keep[k] > top ? keep[k] : top;
	for (int fd = 3; fd < top; fd++) {
		int kept = 0;
		for (int k = 0; k < nkeep; k++)
			kept |= keep[k] == fd;
		if (!kept)
			close(fd);
	}
	// Above the last kept one, in one call (an open-file limit can be 2^20).
	if (close_range(top + 1, ~0U, 0) < 0)
		for (int fd = top + 1; fd < 65536; fd++)
			close(fd);
}

// daemon_main runs the daemon on cfgpath's config; server_port, unless -1,
// takes the place of its SERVER_PORT (-p, as NVIDIA documents the option).
static int daemon_main(const char *cfgpath, int server_port)
{
	struct config c;
	read_config(cfgpath, &c);
	if (server_port >= 0)
		c.server_port = server_port;
	// As NVIDIA's daemon: a log file it cannot open means the console.
	logf = stderr;
	if (c.log_file[0] != '\0' && (logf = fopen(c.log_file, "a")) == NULL) {
		fprintf(stderr, "%s: warning: log file %s: %s; logging to stderr\n", prog, c.log_file, strerror(errno));
		logf = stderr;
	}
	int nodes = count_nodes(c.nodes);
	if (nodes < 0)
		die("node config file %s: %s", c.nodes, strerror(errno));
	// The signals are taken only inside ppoll, so none falls between a
	// check of the flags and the wait.
	sigset_t block, old;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &old);
	// ppoll takes them even if a parent had blocked them: else the
	// daemon would never stop.
	sigdelset(&old, SIGTERM);
	sigdelset(&old, SIGINT);
	sigdelset(&old, SIGUSR1);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int lfd[3], nl = 0;
	char what[4200], buf[INET6_ADDRSTRLEN];
	snprintf(what, sizeof what, "%s: BIND_INTERFACE_IP, SERVER_PORT", c.path);
	lfd[nl++] = listen_tcp(what, &c.bind_ip, c.server_port);
	if (c.cmd_enabled) {
		snprintf(what, sizeof what, "%s: IMEX_CMD_BIND_INTERFACE_IP, IMEX_CMD_PORT", c.path);
		lfd[nl++] = listen_tcp(what, &c.cmd_ip, c.cmd_port);
		if (c.cmd_unix[0] != '\0')
			lfd[nl++] = listen_unix(c.path, c.cmd_unix);
		logline("IMEX daemon (nvmock) ready: %d node(s) in %s, server port %d, command service %s:%d", nodes, c.nodes,
			c.server_port, show_ip(&c.cmd_ip, buf), c.cmd_port);
	} else {
		logline("IMEX daemon (nvmock) ready: %d node(s) in %s, server port %d, command service off", nodes, c.nodes,
			c.server_port);
	}
	if (c.daemonize) {
		int keep[4];
		memcpy(keep, lfd, nl * sizeof *lfd);
		keep[nl] = fileno(logf);
		detach(keep, nl + 1);
	}
	struct client cl[MAX_CLIENTS];
	int ncl = 0;
	while (!stop) {
		if (reload) {
			reload = 0;
			int n = count_nodes(c.nodes);
			if (n < 0)
				logline("SIGUSR1: node config file %s: %s", c.nodes, strerror(errno));
			else
				logline("SIGUSR1: %d node(s) in %s", n, c.nodes);
		}
		struct pollfd fds[3 + MAX_CLIENTS];
		long long now = now_ms(), wait = -1;
		for (int i = 0; i < nl; i++)
			fds[i] = (struct pollfd){.fd = lfd[i], .events = POLLIN};
		for (int i = 0; i < ncl; i++) {
			fds[nl + i] = (struct pollfd){.fd = cl[i].fd, .events = POLLIN};
			long long left = cl[i].deadline > now ? cl[i].deadline - now : 0;
			if (wait < 0 || left < wait)
				wait = left;
		}
		struct timespec ts = {.tv_sec = wait / 1000, .tv_nsec = (wait % 1000) * 1000000};
		if (ppoll(fds, (nfds_t)(nl + ncl), wait < 0 ? NULL : &ts, &old) < 0)
			continue; // EINTR: a signal
		now = now_ms();
		// Clients first: accepting may move them in the table.
		for (int i = ncl - 1; i >= 0; i--) {
			if (((fds[nl + i].revents & (POLLIN | POLLHUP | POLLERR)) && serve(&cl[i])) || cl[i].deadline <= now) {
				close(cl[i].fd);
				cl[i] = cl[--ncl];
			}
		}
		for (int i = 0; i < nl; i++) {
			if (!(fds[i].revents & POLLIN))
				continue;
			int fd = accept4(lfd[i], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
			// Out of descriptors the connection stays queued and ppoll
			// returns at once: the oldest client goes to make room, or
			// with none the daemon waits a little rather than spin.
			if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
				if (ncl > 0)
					drop_oldest(cl, &ncl);
				else
					nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
			}
			if (fd < 0)
				continue;
			if (i == 0) {
				close(fd); // a peer: the daemons exchange nothing here
				continue;
			}
			// Full: the oldest goes, not the newcomer, so that clients
			// which connect and say nothing cannot lock the probe out.
			if (ncl == MAX_CLIENTS)
				drop_oldest(cl, &ncl);
			cl[ncl++] = (struct client){.fd = fd, .deadline = now + CLIENT_MS};
		}
	}
	logline("IMEX daemon (nvmock) stopping");
	if (c.cmd_unix[0] != '\0')
		unlink(c.cmd_unix);
	return 0;
}

// timeouts bounds fd's connect, reads and writes by CTL_MS: a hung daemon,
// or something else on its port, must not hang the probe.
static int timeouts(int fd)
{
	struct timeval tv = {.tv_sec = CTL_MS / 1000, .tv_usec = CTL_MS % 1000 * 1000};
	if (fd >= 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	}
	return fd;
}

static int connect_to(const struct addr *ip, int p, const char *unix_path)
{
	int fd;
	if (unix_path != NULL) {
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		copy(a.sun_path, sizeof a.sun_path, unix_path, "-u");
		fd = timeouts(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
			die("connect to %s: %s", unix_path, strerror(errno));
		return fd;
	}
	struct sockaddr_storage sa;
	socklen_t n = sockaddr_of(ip, p, INADDR_LOOPBACK, &sa);
	fd = timeouts(socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, n) != 0) {
		char buf[INET6_ADDRSTRLEN];
		die("connect to %s port %d: %s", ip->family ? show_ip(ip, buf) : "127.0.0.1", p, strerror(errno));
	}
	return fd;
}

static void usage(void)
{
	fprintf(stderr, "Usage: nvidia-imex-ctl [-i <IP> <PORT>|-u <unix domain socket path>|-c <nvidia-imex config.cfg path>] -q\n"
			"       -q: query the status of the local IMEX daemon once (READY)\n"
			"nvmock models the local daemon's readiness only: -n, -N, -s, -d and -m are not modelled.\n");
}

static int ctl_main(int argc, char **argv)
{
	const char *cfg = NULL, *unix_path = NULL;
	int p = 0, query = 0, by_ip = 0;
	struct addr to = {0};

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-c") == 0 && i + 1 < argc)
			cfg = argv[++i];
		else if (strcmp(a, "-i") == 0 && i + 2 < argc)
			by_ip = 1, to = ip("-i IP PORT", argv[i + 1]), p = port("-i IP PORT", argv[i + 2], 1), i += 2;
		else if (strcmp(a, "-u") == 0 && i + 1 < argc)
			unix_path = argv[++i];
		else if (strcmp(a, "-q") == 0)
			query = 1;
		else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage();
			return 0;
		} else if (strcmp(a, "-n") == 0 || strcmp(a, "-N") == 0 || strcmp(a, "-s") == 0 || strcmp(a, "-d") == 0 ||
			   strcmp(a, "-m") == 0) {
			die("%s is not modelled: nvmock's IMEX daemons do not form a domain", a);
		} else if (strcmp(a, "-H") == 0 || strcmp(a, "-j") == 0 || (strcmp(a, "-t") == 0 && ++i < argc)) {
			// formatting of the commands not modelled
		} else {
			usage();
			return 1;
		}
	}
	if (!query) {
		usage();
		return 1;
	}
	if ((cfg != NULL) + by_ip + (unix_path != NULL) > 1)
		die("only one of -i, -u, or -c can be specified");
	if (!by_ip && unix_path == NULL) {
		struct config c;
		read_config(cfg != NULL ? cfg : DEFAULT_CONFIG, &c);
		if (!c.cmd_enabled)
			die("the command service is not enabled in %s (IMEX_CMD_ENABLED)", c.path);
		to = c.cmd_ip, p = c.cmd_port;
	}
	int fd = connect_to(&to, p, unix_path);
	const char *req = "status\n";
	char buf[256];
	size_t n = 0;
	// MSG_NOSIGNAL: a daemon gone before the request is an error, not a
	// SIGPIPE death without a word.
	ssize_t r = send(fd, req, strlen(req), MSG_NOSIGNAL);
	// The answer is one line; it may come in pieces.
	while (r > 0 && n < sizeof buf - 1 && memchr(buf, '\n', n) == NULL) {
		r = read(fd, buf + n, sizeof buf - 1 - n);
		if (r > 0)
			n += (size_t)r;
	}
	close(fd);
	if (n == 0)
		die("no answer from the IMEX daemon");
	buf[n] = '\0';
	fputs(buf, stdout);
	return 0;
}

#ifdef IMEX_PARSE_ONLY
// The parse-only build (-DIMEX_PARSE_ONLY), for parse_test.go's fuzzing:
// imex-parse CONFIG reads CONFIG as the daemon does and prints what it
// took, each as name=value and a NUL (no address: empty). It listens on
// nothing. A refused config is its one line on stderr and exit status 1.
int main(int argc, char **argv)
{
	if (argc != 2)
		die("usage: imex-parse CONFIG");
	struct config c;
	read_config(argv[1], &c);
	char b1[INET6_ADDRSTRLEN], b2[INET6_ADDRSTRLEN];
	printf("nodes=%s%cbind_ip=%s%cserver_port=%d%ccmd_enabled=%d%ccmd_ip=%s%ccmd_port=%d%ccmd_unix=%s%clog_file=%s%cdaemonize=%d%c",
		c.nodes, 0, c.bind_ip.family ? show_ip(&c.bind_ip, b1) : "", 0, c.server_port, 0, c.cmd_enabled, 0,
		c.cmd_ip.family ? show_ip(&c.cmd_ip, b2) : "", 0, c.cmd_port, 0, c.cmd_unix, 0, c.log_file, 0, c.daemonize, 0);
	return 0;
}
#else
#define SYNOPSIS "nvidia-imex [-c <config path>] [-p|--port <port>]"
#define USAGE "usage: " SYNOPSIS

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	base = base != NULL ? base + 1 : argv[0];
	if (strcmp(base, "nvidia-imex-ctl") == 0) {
		prog = "nvidia-imex-ctl";
		return ctl_main(argc, argv);
	}
	const char *cfg = DEFAULT_CONFIG;
	int server_port = -1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-c") == 0 && i + 1 < argc)
			cfg = argv[++i];
		else if (strcmp(argv[i], "-c") == 0)
			die("%s needs a value; %s", argv[i], USAGE);
		else if ((strcmp(argv[i], "-p") == 0 || strcmp(argv[i], "--port") == 0) && i + 1 < argc) {
			server_port = port(argv[i], argv[i + 1], 0);
			i++;
		} else if (strcmp(argv[i], "-p") == 0 || strcmp(argv[i], "--port") == 0)
			die("%s needs a value; %s", argv[i], USAGE);
		else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fprintf(stderr, "Usage: " SYNOPSIS " (default config %s)\n", DEFAULT_CONFIG);
			return 0;
		} else {
			die("unknown argument %s; %s", argv[i], USAGE);
		}
	}
	return daemon_main(cfg, server_port);
}
#endif
