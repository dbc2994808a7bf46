/*
 * muslprobe is the e2e musl image's program (static, musl libc): it lists
 * the PCI devices /sys shows, one per line, so a test can tell that an
 * image without glibc runs its own entrypoint and sees the node's tree.
 */
#include <dirent.h>
#include <stdio.h>

int main(void)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	if (!d) {
		perror("/sys/bus/pci/devices");
		return 1;
	}
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			puts(e->d_name);
	closedir(d);
	return 0;
}
