//go:build ignore

/*
 * nvmock-hook: the OCI createContainer hook the NRI plugin adds to the
 * containers it edits. It shows the node's PCI tree (rendered by pcisim,
 * with the RDMA device classes of ibshim/sysfs) at the container's /sys,
 * and the driver's procfs files (the overlay's proc: driver/nvidia/,
 * driver/nvidia-caps/ and the majors of devices) at its /proc/driver and
 * /proc/devices, before the container's process starts, so that every
 * program in it sees them, statically linked ones too. A spec's mounts
 * cannot do the second: runc refuses mounts into /proc.
 *
 *   nvmock-hook pcisim TREE [PROC|- [IBLIVE|- [PIDFILE]]]   (the container's state on stdin, from runc)
 *
 * IBLIVE is the node's live InfiniBand port state (hostprep.IBLiveDir),
 * whose HCAs' ports directories it shows over the tree's. PIDFILE, for a
 * container that shows as a GPU process, is where it writes the
 * container's pid on the node, for the NRI plugin to register: that
 * spares every container of the node a PostStartContainer call.
 *
 * (The go:build line keeps the Go tool from taking this directory, which
 * holds the hook's tests, for a cgo package; make cli compiles this file.)
 *
 * It does what pcisim/expose does for nvmock exec (expose.go is the
 * reference; the e2e and exec tests check both against the same tools), in
 * C because it runs once per container creation: a Go program's runtime
 * takes milliseconds to start here, this one a fraction of one (make bench).
 *
 * createContainer hooks run in the container's mount namespace before
 * pivot_root, so the root file system is still at its host path: the
 * bundle's config.json root.path. runc runs the hook in it, which spares
 * waiting for the state on stdin (rootfs_from_cwd).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <unistd.h>

#define MAX_NAMES 256
#define MAX_STATE (4 << 20)
#define MAX_CONFIG (1 << 30)

static void die(const char *fmt, ...)
{
	va_list ap;
	fputs("nvmock-hook: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* pathf formats a path into out (PATH_MAX bytes); too long is an error,
 * never a truncated path. */
__attribute__((format(printf, 2, 3))) static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= PATH_MAX)
		die("path too long: %s...", out);
}

static char *slurp(int fd, const char *what, size_t limit)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap + 1);
	if (!buf)
		die("%s: out of memory", what);
	for (;;) {
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read %s: %s", what, strerror(errno));
		if (n == 0)
			break;
		if (memchr(buf + len, 0, (size_t)n))
			die("%s: holds a NUL byte", what); /* the C string would end there, the file not */
		len += (size_t)n;
		if (len == cap) {
			if (cap >= limit)
				die("%s: larger than %zu bytes", what, limit);
			cap *= 2;
			if (!(buf = realloc(buf, cap + 1)))
				die("%s: out of memory", what);
		}
	}
	buf[len] = 0;
	return buf;
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* skip_string returns what follows the string at p (its opening quote), or
 * NULL if it is not one JSON allows: unended, a control character in it,
 * or an escape JSON lacks. */
static const char *skip_string(const char *p)
{
	for (p++; *p != '"'; p++) {
		if ((unsigned char)*p < 0x20)
			return NULL; /* its end too */
		if (*p != '\\')
			continue;
		if (*++p == 'u') {
			for (int k = 1; k <= 4; k++)
				if (!isxdigit((unsigned char)p[k]))
					return NULL; /* also stops at the end */
			p += 4;
		} else if (!*p || !strchr("\"\\/bfnrt", *p))
			return NULL;
	}
	return p + 1;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static const char *skip_digits(const char *p)
{
	if (!is_digit(*p))
		return NULL;
	while (is_digit(*p))
		p++;
	return p;
}

/* skip_scalar returns what follows the string, number, true, false or
 * null at p, or NULL. */
static const char *skip_scalar(const char *p)
{
	if (*p == '"')
		return skip_string(p);
	static const char *const words[] = {"true", "false", "null"};
	for (size_t i = 0; i < sizeof words / sizeof *words; i++)
		if (!strncmp(p, words[i], strlen(words[i])))
			return p + strlen(words[i]);
	if (*p == '-')
		p++;
	p = *p == '0' ? p + 1 : skip_digits(p);
	if (p && *p == '.')
		p = skip_digits(p + 1);
	if (p && (*p == 'e' || *p == 'E'))
		p = skip_digits(p + 1 + (p[1] == '+' || p[1] == '-'));
	return p;
}

/* encoding/json's: deeper, runc refuses a config too. */
#define MAX_DEPTH 10000

/*
 * json_valid says whether doc is one JSON value and nothing more, as
 * encoding/json (runc's) checks before it decodes: json_member's scan
 * takes a string before a colon for a key, and returns at the first
 * match, which in a cut or broken document is not what runc reads.
 */
static int json_valid(const char *p)
{
	static char ends[MAX_DEPTH]; /* each open container's closing bracket */
	int depth = 0;
	for (p = skip_ws(p);; p = skip_ws(p)) {
		if (depth > 0 && ends[depth - 1] == '}') { /* a member's key */
			if (*p != '"' || !(p = skip_string(p)) || *(p = skip_ws(p)) != ':')
				return 0;
			p = skip_ws(p + 1);
		}
		if (*p == '{' || *p == '[') {
			if (depth == MAX_DEPTH)
				return 0;
			ends[depth++] = *p == '{' ? '}' : ']';
			p = skip_ws(p + 1);
			if (*p != ends[depth - 1])
				continue; /* its first member or element */
			depth--, p++;
		} else if (!(p = skip_scalar(p)))
			return 0;
		/* After a value: a comma, its container's end, or the document's. */
		for (p = skip_ws(p); depth > 0 && *p == ends[depth - 1]; p = skip_ws(p + 1))
			depth--;
		if (depth == 0)
			return *p == 0;
		if (*p != ',')
			return 0;
		p++;
	}
}

/* utf8_valid says whether s is UTF-8 as Go reads it (no overlong forms,
 * surrogates or values past U+10FFFF): encoding/json reads each invalid
 * byte as U+FFFD, so runc's path would not be the hook's. */
static int utf8_valid(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		unsigned c = *p++, n, v, min;
		if (c < 0x80)
			continue;
		if (c >= 0xc2 && c <= 0xdf)
			n = 1, v = c & 0x1f, min = 0x80;
		else if ((c & 0xf0) == 0xe0)
			n = 2, v = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, v = c & 0x07, min = 0x10000;
		else
			return 0;
		for (; n; n--, p++) {
			if ((*p & 0xc0) != 0x80)
				return 0; /* the end too */
			v = v << 6 | (*p & 0x3f);
		}
		if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
			return 0;
	}
	return 1;
}

/* json_string unescapes the string value at q (json_member's) into out. */
static int json_string(const char *q, char *out, size_t size)
{
	if (!q || *q != '"')
		return -1;
	size_t n = 0;
	for (q++; *q && *q != '"'; q++) {
		char c = *q;
		if (c == '\\') {
			q++;
			switch (*q) {
			case '"': case '\\': case '/': c = *q; break;
			case 'u': {
				unsigned v;
				for (int k = 1; k <= 4; k++)
					if (!isxdigit((unsigned char)q[k]))
						return -1; /* also stops at the string's end */
				if (sscanf(q + 1, "%4x", &v) != 1 || v == 0 || v > 0x7f)
					return -1; /* no such path from a runtime */
				c = (char)v;
				q += 4;
				break;
			}
			default: return -1;
			}
		}
		if (n + 1 >= size)
			return -1;
		out[n++] = c;
	}
	if (*q != '"')
		return -1;
	out[n] = 0;
	return utf8_valid(out) ? 0 : -1;
}

/*
 * json_member returns the value of key among the members of the object at
 * obj (in a document json_valid passed), not of objects within it, or
 * NULL: the state's annotations, which pods set, may hold a "bundle" or
 * "root" of their own (review: the first match anywhere was taken). Keys
 * compare as encoding/json (runc's) matches them to a field: unescaped
 * and in any case, where the last of several wins; so a second match is
 * refused, as is a key it cannot compare (non-ASCII ones fold, in Go, to
 * ASCII: U+212A to K).
 */
static const char *json_member(const char *obj, const char *key)
{
	const char *p = skip_ws(obj), *value = NULL;
	if (*p != '{')
		return NULL;
	for (int depth = 0; *p;) {
		switch (*p) {
		case '{': case '[':
			depth++, p++;
			break;
		case '}': case ']':
			if (--depth == 0)
				return value;
			p++;
			break;
		case '"': {
			const char *end = skip_string(p);
			if (!end)
				return NULL;
			const char *q = skip_ws(end);
			if (depth == 1 && *q == ':') {
				char name[64];
				if (json_string(p, name, sizeof name) < 0)
					return NULL;
				for (const char *c = name; *c; c++)
					if (*c & 0x80)
						return NULL;
				if (!strcasecmp(name, key)) {
					if (value)
						return NULL;
					value = skip_ws(q + 1);
				}
			}
			p = end;
			break;
		}
		default:
			p++;
		}
	}
	return NULL;
}

static int is_dot(const char *name) { return !strcmp(name, ".") || !strcmp(name, ".."); }

/* mount_id is the id of the mount fd is on (fdinfo's mnt_id, Linux 3.15),
 * or -1. */
static long mount_id(int fd)
{
	char p[64], buf[512];
	snprintf(p, sizeof p, "/proc/self/fdinfo/%d", fd);
	int f = open(p, O_RDONLY | O_CLOEXEC);
	if (f < 0)
		return -1;
	ssize_t n = read(f, buf, sizeof buf - 1);
	close(f);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	const char *m = strstr(buf, "mnt_id:");
	return m ? strtol(m + 7, NULL, 10) : -1;
}

/*
 * under opens rel below the directory at (O_PATH), following no symlink
 * and, unless cross, on at's own mount: the container's /sys and /proc
 * hold pod volumes, whose links a plain path would follow, before
 * pivot_root, to the node. Kernels before 5.6 lack openat2; there each
 * component is opened without following links, and a mount crossing is
 * seen as a change of mount id (not of device: a bind of the node's own
 * sysfs, in a pod on the node's network, has the container's). -1 with
 * errno (ELOOP for a link, EXDEV for a mount).
 */
static int under(int at, const char *rel, int cross)
{
	struct open_how how = {
		.flags = O_PATH | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (cross ? 0 : RESOLVE_NO_XDEV),
	};
	int fd;
	do
		fd = (int)syscall(SYS_openat2, at, rel, &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	if (fd >= 0 || errno != ENOSYS)
		return fd;
	char part[PATH_MAX];
	pathf(part, "%s", rel);
	struct stat st;
	long top = mount_id(at);
	if (top < 0 || (fd = fcntl(at, F_DUPFD_CLOEXEC, 0)) < 0)
		return -1;
	for (char *save = NULL, *c = strtok_r(part, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		int next = is_dot(c) ? (errno = EXDEV, -1) : openat(fd, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (next < 0 || fstat(next, &st) < 0)
			return -1;
		fd = next;
		if (S_ISLNK(st.st_mode) || (!cross && mount_id(fd) != top)) {
			close(fd);
			errno = S_ISLNK(st.st_mode) ? ELOOP : EXDEV;
			return -1;
		}
	}
	return fd;
}

/* fdpath names the file of an O_PATH descriptor for mount(2). */
static const char *fdpath(char *out, int fd)
{
	pathf(out, "/proc/self/fd/%d", fd);
	return out;
}

/*
 * bind_ro binds src at dst (src NULL: dst is bound already) read-only, and
 * makes the new mount private: a
 * bind of a shared mount (the node's root, where a container with
 * Bidirectional volumes has a shared root) would join its peer group, and
 * whatever is mounted below it later would appear on the node.
 */
static void bind_ro(const char *src, const char *dst)
{
	if (src && mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		die("bind %s at %s: %s", src, dst, strerror(errno));
	if (mount(NULL, dst, NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("make %s private: %s", dst, strerror(errno));
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (mount(NULL, dst, NULL, fl, NULL) < 0 &&
	    (errno != EPERM || mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0))
		die("make %s read-only: %s", dst, strerror(errno));
}

/* target opens rel below at (see under) for a mount to go on, or dies
 * naming the container's path what. */
static int target(int at, const char *rel, int cross, const char *what)
{
	int fd = under(at, rel, cross);
	if (fd < 0)
		die("%s: %s%s", what, strerror(errno),
		    errno == ELOOP || errno == EXDEV ? " (a pod volume or link there?); the container is refused" : "");
	return fd;
}

/* bind_at binds src read-only at rel below at (see under), on the very
 * place checked; then rel, looked up again, is the new mount. */
static void bind_at(const char *src, int at, const char *rel, int cross, const char *what)
{
	char p[PATH_MAX];
	int t = target(at, rel, cross, what);
	if (mount(src, fdpath(p, t), NULL, MS_BIND | MS_REC, NULL) < 0)
		die("bind %s at %s: %s", src, what, strerror(errno));
	close(t);
	t = target(at, rel, 1, what);
	bind_ro(NULL, fdpath(p, t));
	close(t);
}

/* dir_names lists dir's directories whose names start with prefix into
 * names (MAX_NAMES); -1 with errno when dir cannot be read. */
static int dir_names(const char *dir, const char *prefix, char **names)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	size_t len = strlen(prefix);
	for (struct dirent *e; (e = readdir(d));) {
		struct stat st;
		/* DT_UNKNOWN where the file system keeps no types (XFS without ftype). */
		int isdir = e->d_type == DT_DIR ||
			    (e->d_type == DT_UNKNOWN && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode));
		if (!isdir || is_dot(e->d_name) || strncmp(e->d_name, prefix, len))
			continue;
		if (n == MAX_NAMES)
			die("more than %d directories in %s", MAX_NAMES, dir);
		if (!(names[n++] = strdup(e->d_name)))
			die("out of memory");
	}
	closedir(d);
	return n;
}

/*
 * cover_open puts a tmpfs over the directory name of at's mount (what, for
 * messages) holding its entries again (recursive binds of the originals,
 * reached through a descriptor of the covered directory), less the n
 * names, which it binds read-only from the tree's directory from. It
 * returns the tmpfs (O_PATH), which seal then makes read-only. sysfs and
 * procfs refuse mkdir, so a new host bridge, class or driver directory can
 * only appear on a tmpfs.
 */
static const unsigned long tmpfl = MS_NOSUID | MS_NODEV | MS_NOEXEC;

/* The mode of what a cover stands for: procfs's directories are r-x. */
static const char *cover_opts(int fd)
{
	struct statfs sfs;
	return fstatfs(fd, &sfs) == 0 && sfs.f_type == PROC_SUPER_MAGIC ? "mode=555,size=64k" : "mode=755,size=64k";
}

static void seal(int fd, const char *what)
{
	char p[PATH_MAX];
	if (mount(NULL, fdpath(p, fd), NULL, MS_REMOUNT | MS_RDONLY | tmpfl, cover_opts(fd)) < 0)
		die("make %s read-only: %s", what, strerror(errno));
	close(fd);
}

static int cover_open(int at, const char *name, const char *what, const char *from, char **names, int n)
{
	char path[PATH_MAX], src[PATH_MAX];
	/* Only the kernel's own: a pod's volume mounted here could hold
	 * symlinks, which a bind follows, before pivot_root, to the host. */
	int dfd = under(at, name, 0);
	struct statfs sfs;
	if (dfd < 0 || fstatfs(dfd, &sfs) < 0 || (sfs.f_type != SYSFS_MAGIC && sfs.f_type != PROC_SUPER_MAGIC))
		die("%s is not the kernel's sysfs or procfs (a volume mounted there?); the container is refused", what);
	int rfd = open(fdpath(path, dfd), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = rfd < 0 ? NULL : fdopendir(rfd);
	if (!d)
		die("%s: %s", what, strerror(errno));
	struct dirent **ents = NULL;
	int nents = 0, cap = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (is_dot(e->d_name))
			continue;
		if (nents == cap && !(ents = realloc(ents, (cap = cap ? 2 * cap : 32) * sizeof *ents)))
			die("out of memory");
		/* The record only: readdir's can be shorter than a struct dirent. */
		if (!(ents[nents] = malloc(sizeof **ents)))
			die("out of memory");
		ents[nents]->d_type = e->d_type;
		memcpy(ents[nents++]->d_name, e->d_name, strlen(e->d_name) + 1);
	}
	closedir(d);
	int proc = sfs.f_type == PROC_SUPER_MAGIC;
	if (mount("tmpfs", fdpath(path, dfd), "tmpfs", tmpfl, proc ? "mode=555,size=64k" : "mode=755,size=64k") < 0)
		die("mount tmpfs at %s: %s", what, strerror(errno));
	/* Relative names for the many entries: each is looked up twice, and a
	 * runtime's rootfs path is long (containerd's: 7% of the hook's time). */
	int tfd = under(at, name, 1), cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (tfd < 0 || cwd < 0 || fchdir(tfd) < 0)
		die("%s: %s", what, strerror(errno));
	for (int i = 0; i < nents; i++) {
		const char *e = ents[i]->d_name;
		int replaced = 0;
		for (int k = 0; k < n; k++)
			replaced |= !strcmp(e, names[k]);
		/* In /proc/driver the overlay defines the NVIDIA set, as nvmock
		 * exec's: a real driver's entries must not show through. */
		if (replaced || ents[i]->d_type == DT_LNK || (proc && !strncmp(e, "nvidia", 6)))
			continue; /* links: none in sysfs or procfs here; never followed */
		if (ents[i]->d_type == DT_DIR) {
			if (mkdir(e, 0755) < 0)
				die("mkdir %s/%s: %s", what, e, strerror(errno));
		} else {
			int fd = open(e, O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
			if (fd < 0)
				die("create %s/%s: %s", what, e, strerror(errno));
			close(fd);
		}
		pathf(src, "/proc/self/fd/%d/%s", dfd, e);
		if (mount(src, e, NULL, MS_BIND | MS_REC, NULL) < 0)
			die("keep %s/%s: %s", what, e, strerror(errno));
	}
	for (int k = 0; k < n; k++) {
		pathf(src, "%s/%s", from, names[k]);
		if (mkdir(names[k], 0755) < 0)
			die("mkdir %s/%s: %s", what, names[k], strerror(errno));
		bind_ro(src, names[k]);
	}
	if (fchdir(cwd) < 0)
		die("back from %s: %s", what, strerror(errno));
	close(cwd);
	close(dfd);
	for (int i = 0; i < nents; i++)
		free(ents[i]);
	free(ents);
	return tfd;
}

static void cover(int at, const char *name, const char *what, const char *from, char **names, int n)
{
	seal(cover_open(at, name, what, from, names, n), what);
}

/* state_bundle reads the bundle from the container's state into bundle
 * (PATH_MAX). */
static int state_bundle(const char *state, char *bundle)
{
	if (!json_valid(state))
		return -1;
	return json_string(json_member(state, "bundle"), bundle, PATH_MAX);
}

/* config_rootfs reads root.path from a config.json's text into rel, and
 * the root file system it names, which may be relative to the bundle,
 * into rootfs (both PATH_MAX). */
static int config_rootfs(const char *config, const char *bundle, char *rel, char *rootfs)
{
	const char *root = json_valid(config) ? json_member(config, "root") : NULL;
	if (!root || json_string(json_member(root, "path"), rel, PATH_MAX) < 0)
		return -1;
	if (rel[0] == '/')
		pathf(rootfs, "%s", rel);
	else
		pathf(rootfs, "%s/%s", bundle, rel);
	return 0;
}

/* read_rootfs reads the bundle's config.json for the root file system
 * into rootfs (PATH_MAX). */
static int read_rootfs(const char *bundle, char *rootfs)
{
	char path[PATH_MAX], rel[PATH_MAX];
	pathf(path, "%s/config.json", bundle);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	/* A config's env and annotations can be megabytes; runc takes them. */
	char *config = slurp(fd, path, MAX_CONFIG);
	close(fd);
	int r = config_rootfs(config, bundle, rel, rootfs);
	free(config);
	return r;
}

/*
 * rootfs_from_cwd finds the root file system without waiting for the state
 * on stdin, which runc writes only after starting the hook (1-9 ms later on
 * the development machine, most of the hook's cost): runc runs
 * createContainer hooks in the root file system, whose parent is the
 * bundle. Used only when the bundle's config.json confirms it; otherwise
 * the state decides.
 */
static int rootfs_from_cwd(char *rootfs)
{
	char cwd[PATH_MAX], bundle[PATH_MAX], want[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd) || strcmp(cwd, "/") == 0)
		return 0;
	pathf(bundle, "%s", cwd);
	char *slash = strrchr(bundle, '/');
	if (!slash || slash == bundle)
		return 0;
	*slash = 0;
	if (read_rootfs(bundle, want) < 0)
		return 0;
	struct stat a, b;
	if (stat(want, &a) < 0 || stat(cwd, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		return 0;
	pathf(rootfs, "%s", cwd);
	return 1;
}

/*
 * take_mount opens the container's name (sys or proc) below rootfd if it
 * is a mount of the file system magic (a container without one there is
 * left alone: -1), and makes that mount private first, so that nothing
 * mounted on it reaches the node: a container with Bidirectional volumes
 * has a shared root, and its /sys or /proc may even be the node's (a
 * hostPath). Only that mount: volumes below it keep their propagation.
 */
static int take_mount(int rootfd, const char *name, long magic)
{
	char p[PATH_MAX];
	struct statfs sfs;
	int fd = under(rootfd, name, 1);
	if (fd < 0 || fstatfs(fd, &sfs) < 0 || sfs.f_type != magic) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (mount(NULL, fdpath(p, fd), NULL, MS_PRIVATE, NULL) < 0)
		die("make the container's /%s private: %s", name, strerror(errno));
	return fd;
}

/* show_pci shows the tree at the container's /sys; its descriptor, or -1
 * if it has none. */
static int show_pci(int rootfd, const char *tree)
{
	char path[PATH_MAX];
	/* A container without sysfs sees no PCI devices on a real node either. */
	int sys = take_mount(rootfd, "sys", SYSFS_MAGIC);
	if (sys < 0)
		return -1;

	/* The tree's host bridges. */
	char *roots[MAX_NAMES];
	pathf(path, "%s/devices", tree);
	int nroots = dir_names(path, "pci", roots);
	if (nroots < 0)
		die("rendered PCI tree %s: %s", path, strerror(errno));
	if (nroots == 0)
		die("rendered PCI tree %s has no host bridges", tree);
	/* sys/devices: the host's entries and the tree's host bridges. */
	cover(sys, "devices", "/sys/devices", path, roots, nroots);

	char src[PATH_MAX];
	pathf(src, "%s/bus/pci", tree);
	bind_at(src, sys, "bus/pci", 0, "/sys/bus/pci");
	/* The tree's device classes (pci_bus, and infiniband, infiniband_mad,
	 * infiniband_verbs) beside the host's others, replacing a host's own.
	 * A class the kernel lacks (an HCA's on a host without RDMA) needs a
	 * directory, so a cover of /sys/class; else each takes a bind. */
	char *classes[MAX_NAMES];
	pathf(src, "%s/class", tree);
	int nclasses = dir_names(src, "", classes);
	if (nclasses < 0 && errno != ENOENT)
		die("rendered PCI tree %s: %s", src, strerror(errno));
	enum { BIND, ABSENT, BLOCKED } at[MAX_NAMES];
	int absent = 0;
	for (int i = 0; i < nclasses; i++) {
		char rel[PATH_MAX];
		struct stat st;
		pathf(rel, "class/%s", classes[i]);
		int fd = under(sys, rel, 0);
		at[i] = fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) ? BIND : fd < 0 && errno == ENOENT ? ABSENT : BLOCKED;
		absent |= at[i] == ABSENT;
		if (fd >= 0)
			close(fd);
	}
	for (int i = 0; !absent && i < nclasses; i++) {
		char rel[PATH_MAX], what[PATH_MAX], from[PATH_MAX];
		pathf(what, "/sys/class/%s", classes[i]);
		if (at[i] == BLOCKED) {
			/* A pod's volume or link: what it shows is the pod's own, not
			 * the node's, so it stays, and the container runs. */
			fprintf(stderr, "nvmock-hook: %s: a volume or link there (not the kernel's sysfs); left alone\n", what);
			continue;
		}
		pathf(rel, "class/%s", classes[i]);
		pathf(from, "%s/%s", src, classes[i]);
		bind_at(from, sys, rel, 0, what);
	}
	if (absent)
		cover(sys, "class", "/sys/class", src, classes, nclasses);
	/* A kernel without an IOMMU has no directory to show the groups at. */
	int t = under(sys, "kernel/iommu_groups", 0);
	if (t >= 0 || errno != ENOENT) {
		if (t >= 0)
			close(t);
		pathf(src, "%s/kernel/iommu_groups", tree);
		bind_at(src, sys, "kernel/iommu_groups", 0, "/sys/kernel/iommu_groups");
	}
	return sys;
}

/* show_live_ports shows each <hca>/ports of the node's live InfiniBand
 * port state over that HCA's ports in the tree show_pci showed, so that
 * nvmock ctl ib reaches running containers. The place is the one the
 * tree's class link names, reached through the mounts show_pci made and
 * no link. */
static void show_live_ports(int sys, const char *tree, const char *live)
{
	char *hcas[MAX_NAMES];
	int n = dir_names(live, "", hcas);
	if (n < 0)
		die("live InfiniBand ports %s: %s", live, strerror(errno));
	for (int i = 0; i < n; i++) {
		char src[PATH_MAX], link[PATH_MAX], p[PATH_MAX];
		struct stat st;
		pathf(src, "%s/%s/ports", live, hcas[i]);
		if (stat(src, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		pathf(p, "%s/class/infiniband/%s", tree, hcas[i]);
		ssize_t len = readlink(p, link, sizeof link - 1);
		if (len < 0 || len < 6 || strncmp(link, "../../", 6) != 0)
			die("rendered PCI tree %s: not a link into devices/", p);
		link[len] = 0;
		pathf(p, "%s/ports", link + 6);
		bind_at(src, sys, p, 1, p);
	}
}

/*
 * merge_devices writes to fd the kernel's /proc/devices with the character
 * devices of the overlay's file ours added, in the kernel's order (by
 * major; ours after the kernel's of the same major), as the kernel prints
 * the file with NVIDIA's modules loaded. A name the kernel already has
 * (a real driver's) keeps the kernel's line.
 */
#define MAX_DEVS 512
struct chrdev {
	int major;
	char name[64];
};

static int chrdevs(char *text, struct chrdev *out, char **rest)
{
	char *p = strstr(text, "Character devices:\n");
	if (!p)
		return -1;
	p += strlen("Character devices:\n");
	int n = 0;
	while (*p && *p != '\n') {
		char *nl = strchr(p, '\n');
		if (!nl)
			return -1;
		*nl = 0;
		if (n == MAX_DEVS || sscanf(p, "%d %63s", &out[n].major, out[n].name) != 2)
			return -1;
		n++;
		p = nl + 1;
	}
	*rest = p;
	return n;
}

static void merge_devices(const char *ours_path, int fd)
{
	int in = open("/proc/devices", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		die("/proc/devices: %s", strerror(errno));
	char *kernel = slurp(in, "/proc/devices", MAX_STATE);
	close(in);
	if ((in = open(ours_path, O_RDONLY | O_CLOEXEC)) < 0)
		die("%s: %s", ours_path, strerror(errno));
	char *ours_text = slurp(in, ours_path, MAX_STATE);
	close(in);
	static struct chrdev k[MAX_DEVS], o[MAX_DEVS];
	char *rest, *unused;
	int nk = chrdevs(kernel, k, &rest), no = chrdevs(ours_text, o, &unused);
	if (nk < 0)
		die("/proc/devices: no character devices section this hook can read");
	if (no < 0)
		die("%s: no character devices section", ours_path);
	FILE *f = fdopen(fd, "w");
	if (!f)
		die("out of memory");
	fputs("Character devices:\n", f);
	int i = 0;
	for (int j = 0; j <= no; j++) {
		int upto = j < no ? o[j].major : 1 << 30;
		for (; i < nk && k[i].major <= upto; i++)
			fprintf(f, "%3d %s\n", k[i].major, k[i].name);
		if (j == no)
			break;
		int known = 0;
		for (int m = 0; m < nk; m++)
			known |= !strcmp(k[m].name, o[j].name);
		if (!known)
			fprintf(f, "%3d %s\n", o[j].major, o[j].name);
	}
	fputs(rest, f);
	if (fclose(f) != 0)
		die("write the container's /proc/devices: %s", strerror(errno));
	free(kernel);
	free(ours_text);
}

/* show_proc shows the directories of proc/driver (nvidia, nvidia-caps) at
 * the container's /proc/driver beside the kernel's own entries, and
 * proc/devices' majors in its /proc/devices, as the kernel module's procfs
 * shows every container of a real node. */
static void show_proc(int rootfd, const char *proc)
{
	char src[PATH_MAX];
	int procfd = take_mount(rootfd, "proc", PROC_SUPER_MAGIC);
	if (procfd < 0)
		return;
	char *names[MAX_NAMES];
	pathf(src, "%s/driver", proc);
	int n = dir_names(src, "", names);
	if (n < 0)
		die("rendered procfs %s: %s", src, strerror(errno));
	int dir = cover_open(procfd, "driver", "/proc/driver", src, names, n);
	/* The merged /proc/devices is made on a tmpfs of its own, mounted on
	 * that one's .devices, bound, and detached: the bind keeps it, and an
	 * unlinked file on the first would keep it from being made read-only. */
	pathf(src, "%s/devices", proc);
	if (access(src, F_OK) == 0) {
		char tmpdir[PATH_MAX], tmp[PATH_MAX], d[PATH_MAX];
		pathf(tmpdir, "%s/.devices", fdpath(d, dir));
		pathf(tmp, "%s/devices", tmpdir);
		if (mkdir(tmpdir, 0700) < 0)
			die("mkdir %s: %s", tmpdir, strerror(errno));
		if (mount("tmpfs", tmpdir, "tmpfs", tmpfl, "mode=700,size=16k") < 0)
			die("mount tmpfs at %s: %s", tmpdir, strerror(errno));
		int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
		if (fd < 0)
			die("create %s: %s", tmp, strerror(errno));
		merge_devices(src, fd);
		bind_at(tmp, procfd, "devices", 0, "/proc/devices");
		if (umount2(tmpdir, MNT_DETACH) < 0 || rmdir(tmpdir) < 0)
			die("remove %s: %s", tmpdir, strerror(errno));
	}
	seal(dir, "/proc/driver");
	close(procfd);
}

/*
 * report_pid writes the container's pid, as the runtime's pid namespace
 * numbers it, to path (through path.tmp and a rename, so that a reader
 * never sees half of it). runc's init process runs this hook and then
 * becomes the container's process, so it is the parent here (other
 * runtimes are not checked); the state on stdin has its pid in the
 * container's own namespace (1), and /proc, until the pivot, is the
 * runtime's. A failure only warns: the container runs anyway, without
 * its process shown.
 */
static void report_pid(const char *path)
{
	char stat[512], tmp[PATH_MAX];
	int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, stat, sizeof stat - 1);
	if (fd >= 0)
		close(fd);
	char *end = n > 0 ? (stat[n] = 0, strrchr(stat, ')')) : NULL;
	char state;
	int ppid;
	if (!end || sscanf(end + 1, " %c %d", &state, &ppid) != 2 || ppid <= 1) {
		fprintf(stderr, "nvmock-hook: warning: no parent pid in /proc/self/stat; the container's GPU process is not shown\n");
		return;
	}
	pathf(tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (!f || fprintf(f, "%d\n", ppid) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "nvmock-hook: warning: write %s: %s; the container's GPU process is not shown\n", path, strerror(errno));
		unlink(tmp);
	}
}

#ifdef HOOK_PARSE_ONLY
/* read_exact reads path (- for stdin) as slurp does, into a copy of its
 * exact size, so that a sanitizer sees a read past the end. */
static char *read_exact(const char *path, size_t limit)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
	if (fd < 0)
		die("%s: %s", path, strerror(errno));
	char *text = slurp(fd, path, limit), *exact = strdup(text);
	if (!exact)
		die("out of memory");
	free(text);
	close(fd);
	return exact;
}

/*
 * The parse-only build (-DHOOK_PARSE_ONLY), for parse_test.go's fuzzing:
 * nvmock-hook-parse STATE|- CONFIG [STATE CONFIG]... reads each pair as
 * the hook does, parses it with the hook's own functions, and prints what
 * it extracted, each as name=value and a NUL (values hold no NUL;
 * newlines they may), then end and a NUL. Many pairs a run: a sanitizer's
 * start costs more than the parse. It mounts and writes nothing. A
 * refused input is a line on stderr and exit status 1.
 */
int main(int argc, char **argv)
{
	if (argc < 3 || argc % 2 == 0)
		die("usage: nvmock-hook-parse STATE|- CONFIG [STATE CONFIG]...");
	int bad = 0;
	for (int i = 1; i < argc; i += 2) {
		char bundle[PATH_MAX], rel[PATH_MAX], rootfs[PATH_MAX];
		char *state = read_exact(argv[i], MAX_STATE);
		int has_bundle = state_bundle(state, bundle) == 0;
		if (!has_bundle)
			bad = 1, strcpy(bundle, "/bundle"), fprintf(stderr, "nvmock-hook: %s: no bundle\n", argv[i]);
		char *config = read_exact(argv[i + 1], MAX_CONFIG);
		int has_root = config_rootfs(config, bundle, rel, rootfs) == 0;
		if (!has_root)
			bad = 1, fprintf(stderr, "nvmock-hook: %s: no root.path\n", argv[i + 1]);
		if (has_bundle)
			printf("bundle=%s%c", bundle, 0);
		if (has_root)
			printf("root.path=%s%crootfs=%s%c", rel, 0, rootfs, 0);
		printf("end%c", 0);
		free(state);
		free(config);
	}
	return bad;
}
#else
int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "refuse") == 0) {
		/* A request the node cannot meet fails the container as it
		 * starts, where NVIDIA's runtime fails it: runc names the hook
		 * and prints this. */
		fprintf(stderr, "%s\n", argv[2]);
		return 1;
	}
	if (argc < 3 || argc > 6 || strcmp(argv[1], "pcisim") != 0)
		die("usage: nvmock-hook pcisim TREE [PROC|- [IBLIVE|- [PIDFILE]]] (an OCI createContainer hook)");

	char bundle[PATH_MAX], rootfs[PATH_MAX];
	if (!rootfs_from_cwd(rootfs)) {
		char *state = slurp(0, "container state on stdin", MAX_STATE);
		if (state_bundle(state, bundle) < 0)
			die("no container state with a bundle on stdin; run it as an OCI createContainer hook");
		if (read_rootfs(bundle, rootfs) < 0)
			die("%s/config.json: no root.path", bundle);
	}
	int rootfd = open(rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		die("root file system %s: %s", rootfs, strerror(errno));
	int sys = show_pci(rootfd, argv[2]);
	if (argc >= 4 && strcmp(argv[3], "-") != 0)
		show_proc(rootfd, argv[3]);
	if (argc >= 5 && sys >= 0 && strcmp(argv[4], "-") != 0)
		show_live_ports(sys, argv[2], argv[4]);
	if (argc == 6)
		report_pid(argv[5]);
	return 0;
}
#endif
