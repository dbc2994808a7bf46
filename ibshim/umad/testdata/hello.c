/* hello: a program that prints one line, and with "umad" says whether
 * /dev/infiniband/umad0 opened (a preloaded shim makes it open). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	printf("hello\n");
	if (argc > 1 && strcmp(argv[1], "umad") == 0) {
		int fd = open("/dev/infiniband/umad0", O_RDWR);
		printf("umad0: %s\n", fd >= 0 ? "opened" : "not opened");
	}
	return 0;
}
