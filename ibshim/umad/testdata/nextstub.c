/* nextstub: open, close and read that return at once, preloaded after the
 * shim so that openbench measures the shim without the system calls. */
#include <sys/types.h>

int open(const char *path, int flags, ...)
{
	(void)path, (void)flags;
	return 3;
}

int close(int fd)
{
	(void)fd;
	return 0;
}

ssize_t read(int fd, void *buf, size_t n)
{
	(void)fd, (void)buf, (void)n;
	return -1;
}
