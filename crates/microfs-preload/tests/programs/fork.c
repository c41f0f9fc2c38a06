/* What a child of fork() may do with the parent's checkpoint namespace: nothing (EBUSY), while
 * the parent goes on. Also: a call the shim does not intercept, on one of its descriptors, fails
 * with EBADF and touches nothing, and a writable shared mapping of one of our files is refused.
 * Prints a transcript. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char p[4096], q[4096];
    snprintf(p, sizeof p, "%s/parent", argv[1]);
    snprintf(q, sizeof q, "%s/child", argv[1]);
    int fd = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
    printf("parent open: %s\n", fd >= 0 ? "ok" : strerror(errno));
    printf("parent write: %zd\n", write(fd, "before ", 7));
    int n = 0;
    errno = 0;
    int r = ioctl(fd, FIONREAD, &n);
    printf("ioctl FIONREAD on our fd: %d %s\n", r, strerror(errno));
    errno = 0;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    printf("writable shared mmap of our file: %s\n", m == MAP_FAILED ? strerror(errno) : "mapped");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        errno = 0;
        ssize_t w = write(fd, "child ", 6);
        printf("child write inherited: %zd %s\n", w, strerror(errno));
        errno = 0;
        int c = open(q, O_CREAT | O_WRONLY, 0644);
        printf("child open: %d %s\n", c, strerror(errno));
        struct stat st;
        errno = 0;
        int s = stat(p, &st);
        printf("child stat: %d %s\n", s, strerror(errno));
        printf("child close inherited: %d\n", close(fd));
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    printf("parent write after child: %zd\n", write(fd, "after", 5));
    char buf[64] = {0};
    printf("parent pread: %zd %s\n", pread(fd, buf, sizeof buf - 1, 0), buf);
    struct stat st;
    errno = 0;
    int e = stat(q, &st);
    printf("child's file exists: %s\n", e == 0 ? "yes" : strerror(errno));
    printf("parent close: %d\n", close(fd));
    return 0;
}
