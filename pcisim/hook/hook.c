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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <unistd.h>

#define MAX_NAMES 256
#define MAX_JSON (4 << 20)

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

static char *slurp(int fd, const char *what)
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
		len += (size_t)n;
		if (len == cap) {
			if (cap >= MAX_JSON)
				die("%s: larger than %d bytes", what, MAX_JSON);
			cap *= 2;
			if (!(buf = realloc(buf, cap + 1)))
				die("%s: out of memory", what);
		}
	}
	buf[len] = 0;
	return buf;
}

/*
 * json_string finds "key": "value" after from and returns the value,
 * unescaped, in out. The documents are the runtime's own (OCI state and
 * config.json, written by Go's encoder): a key in quotes followed by a colon
 * is a key, since a quote inside a string value is escaped.
 */
static int json_string(const char *from, const char *key, char *out, size_t size)
{
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\"", key);
	for (const char *p = strstr(from, pat); p; p = strstr(p + 1, pat)) {
		const char *q = p + strlen(pat);
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		if (*q != ':')
			continue;
		q++;
		while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
			q++;
		if (*q != '"')
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
		return 0;
	}
	return -1;
}

static void bind_ro(const char *src, const char *dst)
{
	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0)
		die("bind %s at %s: %s", src, dst, strerror(errno));
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (mount(NULL, dst, NULL, fl, NULL) < 0 &&
	    (errno != EPERM || mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0))
		die("make %s read-only: %s", dst, strerror(errno));
}

static int is_dot(const char *name) { return !strcmp(name, ".") || !strcmp(name, ".."); }

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
		if (e->d_type != DT_DIR || is_dot(e->d_name) || strncmp(e->d_name, prefix, len))
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
 * cover_open puts a tmpfs over dir holding dir's entries again (recursive
 * binds of the originals, reached through a descriptor of the covered
 * directory), less the n names, which it binds read-only from the tree's
 * directory from; seal then makes the tmpfs read-only. sysfs and procfs
 * refuse mkdir, so a new host bridge, class or driver directory can only
 * appear on a tmpfs.
 */
static const unsigned long tmpfl = MS_NOSUID | MS_NODEV | MS_NOEXEC;

static void seal(const char *dir)
{
	if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY | tmpfl, "mode=755,size=64k") < 0)
		die("make %s read-only: %s", dir, strerror(errno));
}

static void cover_open(const char *dir, const char *from, char **names, int n)
{
	char path[PATH_MAX], src[PATH_MAX];
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		die("%s: %s", dir, strerror(errno));
	/* Only the kernel's own: a pod's volume mounted here could hold
	 * symlinks, which a bind follows, before pivot_root, to the host. */
	struct statfs sfs;
	if (fstatfs(dfd, &sfs) < 0 || (sfs.f_type != SYSFS_MAGIC && sfs.f_type != PROC_SUPER_MAGIC))
		die("%s is not the kernel's sysfs or procfs (a volume mounted there?); it is not covered", dir);
	DIR *d = opendir(dir);
	if (!d)
		die("%s: %s", dir, strerror(errno));
	struct dirent **ents = NULL;
	int nents = 0, cap = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (is_dot(e->d_name))
			continue;
		if (nents == cap && !(ents = realloc(ents, (cap = cap ? 2 * cap : 32) * sizeof *ents)))
			die("out of memory");
		if (!(ents[nents] = malloc(sizeof **ents)))
			die("out of memory");
		memcpy(ents[nents++], e, sizeof **ents);
	}
	closedir(d);
	if (mount("tmpfs", dir, "tmpfs", tmpfl, "mode=755,size=64k") < 0)
		die("mount tmpfs at %s: %s", dir, strerror(errno));
	/* Relative names for the many entries: each is looked up twice, and a
	 * runtime's rootfs path is long (containerd's: 7% of the hook's time). */
	int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cwd < 0 || chdir(dir) < 0)
		die("%s: %s", dir, strerror(errno));
	for (int i = 0; i < nents; i++) {
		const char *name = ents[i]->d_name;
		int replaced = 0;
		for (int k = 0; k < n; k++)
			replaced |= !strcmp(name, names[k]);
		if (replaced || ents[i]->d_type == DT_LNK)
			continue; /* none in sysfs or procfs here; never followed */
		if (ents[i]->d_type == DT_DIR) {
			if (mkdir(name, 0755) < 0)
				die("mkdir %s/%s: %s", dir, name, strerror(errno));
		} else {
			int fd = open(name, O_CREAT | O_WRONLY | O_CLOEXEC, 0444);
			if (fd < 0)
				die("create %s/%s: %s", dir, name, strerror(errno));
			close(fd);
		}
		pathf(src, "/proc/self/fd/%d/%s", dfd, name);
		if (mount(src, name, NULL, MS_BIND | MS_REC, NULL) < 0)
			die("keep %s/%s: %s", dir, name, strerror(errno));
	}
	for (int k = 0; k < n; k++) {
		pathf(path, "%s/%s", dir, names[k]);
		pathf(src, "%s/%s", from, names[k]);
		if (mkdir(path, 0755) < 0)
			die("mkdir %s: %s", path, strerror(errno));
		bind_ro(src, path);
	}
	if (fchdir(cwd) < 0)
		die("back from %s: %s", dir, strerror(errno));
	close(cwd);
	close(dfd);
	for (int i = 0; i < nents; i++)
		free(ents[i]);
	free(ents);
}

static void cover(const char *dir, const char *from, char **names, int n)
{
	cover_open(dir, from, names, n);
	seal(dir);
}

/* read_rootfs reads the bundle's config.json for root.path, which may be
 * relative to the bundle, into rootfs (PATH_MAX). */
static int read_rootfs(const char *bundle, char *rootfs)
{
	char path[PATH_MAX], rel[PATH_MAX];
	pathf(path, "%s/config.json", bundle);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char *config = slurp(fd, path);
	close(fd);
	const char *root = strstr(config, "\"root\"");
	int r = root ? json_string(root, "path", rel, sizeof rel) : -1;
	if (r == 0) {
		if (rel[0] == '/')
			pathf(rootfs, "%s", rel);
		else
			pathf(rootfs, "%s/%s", bundle, rel);
	}
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
 * take_mount says whether path is a mount of the file system magic (a
 * container without one there is left alone), and makes it private first:
 * nothing mounted below may reach the host, since a container with
 * Bidirectional mounts has a shared root, and its /sys or /proc may even
 * be the host's (a hostPath).
 */
static int take_mount(const char *path, long magic)
{
	struct statfs sfs;
	if (statfs(path, &sfs) < 0 || sfs.f_type != magic)
		return 0;
	if (mount(NULL, path, NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("make %s private: %s", path, strerror(errno));
	return 1;
}

/* show_pci shows the tree at the container's /sys; 0 if it has none. */
static int show_pci(const char *rootfs, const char *tree)
{
	char path[PATH_MAX];
	/* A container without sysfs sees no PCI devices on a real node either. */
	pathf(path, "%s/sys", rootfs);
	if (!take_mount(path, SYSFS_MAGIC))
		return 0;

	/* The tree's host bridges. */
	char *roots[MAX_NAMES];
	pathf(path, "%s/devices", tree);
	int nroots = dir_names(path, "pci", roots);
	if (nroots < 0)
		die("rendered PCI tree %s: %s", path, strerror(errno));
	if (nroots == 0)
		die("rendered PCI tree %s has no host bridges", tree);
	/* sys/devices: the host's entries and the tree's host bridges. */
	char dir[PATH_MAX];
	pathf(dir, "%s/sys/devices", rootfs);
	cover(dir, path, roots, nroots);

	char src[PATH_MAX];
	pathf(src, "%s/bus/pci", tree);
	pathf(path, "%s/sys/bus/pci", rootfs);
	bind_ro(src, path);
	/* The tree's device classes (infiniband, infiniband_mad,
	 * infiniband_verbs) beside the host's others, replacing a host's own;
	 * a tree without class/ (no RDMA devices) leaves sys/class alone. */
	char *classes[MAX_NAMES];
	pathf(src, "%s/class", tree);
	int nclasses = dir_names(src, "", classes);
	if (nclasses < 0 && errno != ENOENT)
		die("rendered PCI tree %s: %s", src, strerror(errno));
	if (nclasses > 0) {
		pathf(path, "%s/sys/class", rootfs);
		cover(path, src, classes, nclasses);
	}
	/* A kernel without an IOMMU has no directory to show the groups at. */
	pathf(path, "%s/sys/kernel/iommu_groups", rootfs);
	struct stat st;
	if (stat(path, &st) == 0) {
		pathf(src, "%s/kernel/iommu_groups", tree);
		bind_ro(src, path);
	}
	return 1;
}

/* show_live_ports shows each <hca>/ports of the node's live InfiniBand
 * port state over that HCA's ports in the tree show_pci showed (through
 * the class link), so that nvmock ctl ib reaches running containers. */
static void show_live_ports(const char *rootfs, const char *live)
{
	char *hcas[MAX_NAMES];
	int n = dir_names(live, "", hcas);
	if (n < 0)
		die("live InfiniBand ports %s: %s", live, strerror(errno));
	for (int i = 0; i < n; i++) {
		char src[PATH_MAX], dst[PATH_MAX];
		struct stat st;
		pathf(src, "%s/%s/ports", live, hcas[i]);
		if (stat(src, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		pathf(dst, "%s/sys/class/infiniband/%s/ports", rootfs, hcas[i]);
		bind_ro(src, dst);
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
	char *kernel = slurp(in, "/proc/devices");
	close(in);
	if ((in = open(ours_path, O_RDONLY | O_CLOEXEC)) < 0)
		die("%s: %s", ours_path, strerror(errno));
	char *ours_text = slurp(in, ours_path);
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
static void show_proc(const char *rootfs, const char *proc)
{
	char path[PATH_MAX], src[PATH_MAX];
	pathf(path, "%s/proc", rootfs);
	if (!take_mount(path, PROC_SUPER_MAGIC))
		return;
	char *names[MAX_NAMES];
	pathf(src, "%s/driver", proc);
	int n = dir_names(src, "", names);
	if (n < 0)
		die("rendered procfs %s: %s", src, strerror(errno));
	char dir[PATH_MAX];
	pathf(dir, "%s/proc/driver", rootfs);
	cover_open(dir, src, names, n);
	/* The merged /proc/devices is made on a tmpfs of its own, mounted on
	 * that one's .devices, bound, and detached: the bind keeps it, and an
	 * unlinked file on the first would keep it from being made read-only. */
	pathf(src, "%s/devices", proc);
	if (access(src, F_OK) == 0) {
		char tmpdir[PATH_MAX], tmp[PATH_MAX];
		pathf(tmpdir, "%s/.devices", dir);
		pathf(tmp, "%s/devices", tmpdir);
		if (mkdir(tmpdir, 0700) < 0)
			die("mkdir %s: %s", tmpdir, strerror(errno));
		if (mount("tmpfs", tmpdir, "tmpfs", tmpfl, "mode=700,size=16k") < 0)
			die("mount tmpfs at %s: %s", tmpdir, strerror(errno));
		int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
		if (fd < 0)
			die("create %s: %s", tmp, strerror(errno));
		merge_devices(src, fd);
		pathf(path, "%s/proc/devices", rootfs);
		bind_ro(tmp, path);
		if (umount2(tmpdir, MNT_DETACH) < 0 || rmdir(tmpdir) < 0)
			die("remove %s: %s", tmpdir, strerror(errno));
	}
	seal(dir);
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

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 6 || strcmp(argv[1], "pcisim") != 0)
		die("usage: nvmock-hook pcisim TREE [PROC|- [IBLIVE|- [PIDFILE]]] (an OCI createContainer hook)");

	char bundle[PATH_MAX], rootfs[PATH_MAX];
	if (!rootfs_from_cwd(rootfs)) {
		char *state = slurp(0, "container state on stdin");
		if (json_string(state, "bundle", bundle, sizeof bundle) < 0)
			die("no container state with a bundle on stdin; run it as an OCI createContainer hook");
		if (read_rootfs(bundle, rootfs) < 0)
			die("%s/config.json: no root.path", bundle);
	}
	int sys = show_pci(rootfs, argv[2]);
	if (argc >= 4 && strcmp(argv[3], "-") != 0)
		show_proc(rootfs, argv[3]);
	if (argc >= 5 && sys && strcmp(argv[4], "-") != 0)
		show_live_ports(rootfs, argv[4]);
	if (argc == 6)
		report_pid(argv[5]);
	return 0;
}
