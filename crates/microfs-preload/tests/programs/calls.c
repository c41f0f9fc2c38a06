/* Exercises every call the checkpoint/restart shim intercepts, on files under argv[1], and
 * prints a transcript: return values (descriptors as "fd"), errno names, file contents, sizes,
 * modes and the times set explicitly. Inode numbers, devices, block counts and times taken from
 * the clock are not printed, so a run on a kernel directory and a run under the shim give the
 * same transcript when the shim behaves as the kernel does. */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

int __open_2(const char *, int);
int __open64_2(const char *, int);
int __openat_2(int, const char *, int);

static const char *base;

static const char *ename(int e) {
    switch (e) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case ENOTEMPTY: return "ENOTEMPTY";
    case EISDIR: return "EISDIR";
    case ENOTDIR: return "ENOTDIR";
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case EXDEV: return "EXDEV";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case EBUSY: return "EBUSY";
    case ENXIO: return "ENXIO";
    default: {
        static char b[32];
        snprintf(b, sizeof b, "errno%d", e);
        return b;
    }
    }
}

static void rep(const char *what, long r) {
    if (r < 0)
        printf("%s = -1 %s\n", what, ename(errno));
    else
        printf("%s = %ld\n", what, r);
}

static void repfd(const char *what, int r) {
    if (r < 0)
        printf("%s = -1 %s\n", what, ename(errno));
    else
        printf("%s = fd\n", what);
}

#define T(what, expr) do { errno = 0; long r_ = (long)(expr); rep(what, r_); } while (0)
#define TFD(var, what, expr) do { errno = 0; var = (expr); repfd(what, var); } while (0)

static char pbuf[8][4096];
static int pi;
static const char *P(const char *rel) {
    char *b = pbuf[pi++ % 8];
    snprintf(b, 4096, "%s/%s", base, rel);
    return b;
}

static void show_stat(const char *what, int r, const struct stat *st) {
    if (r < 0) {
        printf("%s = -1 %s\n", what, ename(errno));
        return;
    }
    if (S_ISDIR(st->st_mode))
        printf("%s = dir mode %o\n", what, st->st_mode & 07777);
    else
        printf("%s = %s mode %o size %lld nlink %lu\n", what, S_ISREG(st->st_mode) ? "file" : "other",
               st->st_mode & 07777, (long long)st->st_size, (unsigned long)st->st_nlink);
}

static void cat(const char *what, const char *path) {
    char buf[4096];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("%s: open -1 %s\n", what, ename(errno));
        return;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n < 0) {
        printf("%s: read -1 %s\n", what, ename(errno));
        return;
    }
    printf("%s: %zd bytes:", what, n);
    for (ssize_t i = 0; i < n; i++)
        printf(buf[i] >= 32 && buf[i] < 127 ? "%c" : "\\%02x", (unsigned char)buf[i]);
    printf("\n");
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void list(const char *what, DIR *d) {
    char *names[256];
    int n = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) && n < 256) {
        char t = e->d_type == DT_DIR ? 'd' : e->d_type == DT_REG ? 'f' : '?';
        names[n] = malloc(strlen(e->d_name) + 3);
        sprintf(names[n++], "%c:%s", t, e->d_name);
    }
    printf("%s: end errno %s; %d entries:", what, errno ? ename(errno) : "0", n);
    qsort(names, n, sizeof names[0], cmpstr);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: calls DIR\n");
        return 2;
    }
    base = argv[1];
    umask(022);
    int fd, fd2, fd3, dfd;
    char buf[256];
    struct stat st;

    printf("== open family\n");
    TFD(fd, "open creat excl", open(P("a"), O_CREAT | O_EXCL | O_RDWR, 0644));
    T("write", write(fd, "hello world", 11));
    TFD(fd2, "open excl again", open(P("a"), O_CREAT | O_EXCL | O_RDWR, 0644));
    TFD(fd2, "open missing", open(P("nope"), O_RDONLY));
    TFD(fd2, "open missing parent", open(P("nodir/x"), O_CREAT | O_WRONLY, 0644));
    T("close", close(fd));
    T("close again", close(fd));
    TFD(fd, "open64 rdonly", open64(P("a"), O_RDONLY));
    T("write on rdonly", write(fd, "x", 1));
    memset(buf, 0, sizeof buf);
    T("read", read(fd, buf, 5));
    printf("read data: %s\n", buf);
    T("close", close(fd));
    TFD(fd, "creat", creat(P("b"), 0600));
    T("read on wronly", read(fd, buf, 1));
    T("write", write(fd, "0123456789", 10));
    T("close", close(fd));
    TFD(fd, "creat64 truncates", creat64(P("b"), 0600));
    T("close", close(fd));
    cat("b after creat64", P("b"));
    TFD(fd, "__open_2", __open_2(P("a"), O_RDONLY));
    T("close", close(fd));
    TFD(fd, "__open64_2", __open64_2(P("a"), O_RDONLY));
    T("close", close(fd));
    TFD(fd, "__open_2 missing", __open_2(P("nope"), O_RDONLY));
    T("mkdir d", mkdir(P("d"), 0755));
    T("mkdir d again", mkdir(P("d"), 0755));
    T("mkdir missing parent", mkdir(P("x/y"), 0755));
    TFD(fd, "open dir wronly", open(P("d"), O_WRONLY));
    TFD(fd, "open file O_DIRECTORY", open(P("a"), O_RDONLY | O_DIRECTORY));
    TFD(fd, "open dir O_CREAT", open(P("d"), O_CREAT | O_RDONLY, 0644));
    TFD(dfd, "open dir", open(P("d"), O_RDONLY | O_DIRECTORY));
    T("read on dir", read(dfd, buf, 1));
    TFD(fd, "openat rel", openat(dfd, "f", O_CREAT | O_RDWR | O_TRUNC, 0640));
    T("write", write(fd, "in d", 4));
    T("close", close(fd));
    TFD(fd, "openat64 rel", openat64(dfd, "f", O_RDONLY));
    T("close", close(fd));
    TFD(fd, "__openat_2", __openat_2(dfd, "f", O_RDONLY));
    T("close", close(fd));
    TFD(fd, "openat abs", openat(dfd, P("a"), O_RDONLY));
    T("close", close(fd));
    TFD(fd, "openat dotdot", openat(dfd, "../a", O_RDONLY));
    T("close", close(fd));
    TFD(fd, "openat on file fd", openat(open(P("a"), O_RDONLY), "x", O_RDONLY));
    cat("d/f", P("d/f"));
    cat("through dots", P("d/./../d/f"));

    printf("== data\n");
    TFD(fd, "open rdwr", open(P("c"), O_CREAT | O_RDWR, 0644));
    T("pwrite", pwrite(fd, "abcdef", 6, 0));
    T("pwrite64", pwrite64(fd, "XY", 2, 2));
    memset(buf, 0, sizeof buf);
    T("pread", pread(fd, buf, 100, 1));
    printf("pread data: %s\n", buf);
    T("pread64 past end", pread64(fd, buf, 10, 100));
    T("pread negative", pread(fd, buf, 1, -1));
    T("lseek cur", lseek(fd, 0, SEEK_CUR));
    T("lseek end", lseek(fd, 0, SEEK_END));
    T("lseek64 set", lseek64(fd, 3, SEEK_SET));
    T("lseek negative", lseek(fd, -10, SEEK_SET));
    T("lseek bad whence", lseek(fd, 0, 42));
    T("lseek data", lseek(fd, 0, SEEK_DATA));
    T("lseek hole", lseek(fd, 0, SEEK_HOLE));
    T("lseek data past end", lseek(fd, 100, SEEK_DATA));
    struct iovec iov[3] = {{"one ", 4}, {"two ", 4}, {"three", 5}};
    T("lseek end", lseek(fd, 0, SEEK_END));
    T("writev", writev(fd, iov, 3));
    char r1[3] = {0}, r2[5] = {0}, r3[20] = {0};
    struct iovec rv[3] = {{r1, 2}, {r2, 4}, {r3, 19}};
    T("lseek set", lseek(fd, 0, SEEK_SET));
    T("readv", readv(fd, rv, 3));
    printf("readv data: %s|%s|%s\n", r1, r2, r3);
    struct iovec pv[2] = {{"PP", 2}, {"QQ", 2}};
    T("pwritev", pwritev(fd, pv, 2, 1));
    char s1[4] = {0}, s2[4] = {0};
    struct iovec prv[2] = {{s1, 3}, {s2, 3}};
    T("preadv", preadv(fd, prv, 2, 0));
    printf("preadv data: %s|%s\n", s1, s2);
    T("lseek gap", lseek(fd, 30, SEEK_SET));
    T("write after gap", write(fd, "Z", 1));
    T("fsync", fsync(fd));
    T("fdatasync", fdatasync(fd));
    cat("c", P("c"));
    T("ftruncate shrink", ftruncate(fd, 5));
    T("ftruncate64 grow", ftruncate64(fd, 8));
    T("ftruncate negative", ftruncate(fd, -1));
    cat("c truncated", P("c"));
    T("truncate", truncate(P("c"), 3));
    T("truncate64", truncate64(P("c"), 4));
    T("truncate dir", truncate(P("d"), 0));
    T("truncate missing", truncate(P("nope"), 0));
    cat("c truncated by path", P("c"));
    T("fallocate", fallocate(fd, 0, 0, 10));
    T("posix_fallocate", posix_fallocate(fd, 0, 12));
    T("posix_fadvise", posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL));
    T("fstat", fstat(fd, &st));
    show_stat("fstat", 0, &st);
    T("close", close(fd));
    TFD(fd, "open rdonly", open(P("c"), O_RDONLY));
    T("ftruncate on rdonly", ftruncate(fd, 0));
    T("close", close(fd));
    TFD(fd, "open append", open(P("c"), O_WRONLY | O_APPEND));
    T("lseek set", lseek(fd, 0, SEEK_SET));
    T("write appends", write(fd, "END", 3));
    T("close", close(fd));
    cat("c appended", P("c"));
    T("read bad fd", read(9999, buf, 1));
    T("write bad fd", write(-1, buf, 1));
    T("fsync bad fd", fsync(9998));

    printf("== copy_file_range and sendfile with fallback\n");
    {
        int in = open(P("a"), O_RDONLY), out = open(P("copy"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ssize_t n = copy_file_range(in, NULL, out, NULL, 100, 0);
        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EBADF || errno == ENOSYS)) {
            while ((n = read(in, buf, sizeof buf)) > 0)
                write(out, buf, n);
        }
        close(in);
        close(out);
        cat("copy", P("copy"));
        in = open(P("a"), O_RDONLY);
        out = open(P("sent"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        n = sendfile(out, in, NULL, 100);
        if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
            while ((n = read(in, buf, sizeof buf)) > 0)
                write(out, buf, n);
        }
        close(in);
        close(out);
        cat("sent", P("sent"));
    }

    printf("== stat family\n");
    T("stat", stat(P("a"), &st));
    show_stat("stat a", 0, &st);
    show_stat("stat64 d", stat64(P("d"), (struct stat64 *)&st), &st);
    show_stat("lstat b", lstat(P("b"), &st), &st);
    show_stat("lstat64 b", lstat64(P("b"), (struct stat64 *)&st), &st);
    show_stat("stat missing", stat(P("nope"), &st), &st);
    show_stat("stat through file", stat(P("a/x"), &st), &st);
    show_stat("fstatat rel", fstatat(dfd, "f", &st, 0), &st);
    show_stat("fstatat64 rel", fstatat64(dfd, "f", (struct stat64 *)&st, 0), &st);
    show_stat("fstatat empty path", fstatat(dfd, "", &st, AT_EMPTY_PATH), &st);
    show_stat("fstatat missing", fstatat(dfd, "nope", &st, 0), &st);
    show_stat("fstat64 dir", fstat64(dfd, (struct stat64 *)&st), &st);
    {
        struct statx sx;
        errno = 0;
        int r = statx(AT_FDCWD, P("a"), 0, STATX_BASIC_STATS, &sx);
        if (r < 0)
            printf("statx = -1 %s\n", ename(errno));
        else
            printf("statx = %s mode %o size %llu\n", S_ISREG(sx.stx_mode) ? "file" : "?", sx.stx_mode & 07777,
                   (unsigned long long)sx.stx_size);
        r = statx(dfd, "", AT_EMPTY_PATH, STATX_BASIC_STATS, &sx);
        printf("statx empty path = %d %s\n", r, S_ISDIR(sx.stx_mode) ? "dir" : "?");
        r = statx(AT_FDCWD, P("nope"), 0, STATX_BASIC_STATS, &sx);
        printf("statx missing = %d %s\n", r, r < 0 ? ename(errno) : "");
    }

    printf("== attributes\n");
    T("chmod", chmod(P("a"), 0600));
    show_stat("after chmod", stat(P("a"), &st), &st);
    TFD(fd, "open", open(P("a"), O_RDONLY));
    T("fchmod", fchmod(fd, 0640));
    show_stat("after fchmod", fstat(fd, &st), &st);
    T("fchmodat", fchmodat(dfd, "f", 0444, 0));
    show_stat("after fchmodat", fstatat(dfd, "f", &st, 0), &st);
    T("chmod missing", chmod(P("nope"), 0644));
    T("chown", chown(P("a"), getuid(), getgid()));
    T("fchown", fchown(fd, getuid(), getgid()));
    T("fchownat", fchownat(dfd, "f", getuid(), getgid(), 0));
    T("chown missing", chown(P("nope"), getuid(), getgid()));
    {
        struct timespec ts[2] = {{1000000000, 500}, {1200000000, 250000000}};
        T("utimensat", utimensat(AT_FDCWD, P("a"), ts, 0));
        stat(P("a"), &st);
        printf("times: atime %lld.%09ld mtime %lld.%09ld\n", (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
               (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        struct timespec ts2[2] = {{0, UTIME_OMIT}, {1300000000, 0}};
        T("futimens", futimens(fd, ts2));
        fstat(fd, &st);
        printf("times: atime %lld.%09ld mtime %lld.%09ld\n", (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec,
               (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        T("utimensat rel", utimensat(dfd, "f", ts, 0));
        fstatat(dfd, "f", &st, 0);
        printf("times: mtime %lld.%09ld\n", (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        struct timespec bad[2] = {{0, 2000000000}, {0, 0}};
        T("utimensat bad nsec", utimensat(AT_FDCWD, P("a"), bad, 0));
        T("utimensat missing", utimensat(AT_FDCWD, P("nope"), ts, 0));
    }
    T("close", close(fd));
    T("access", access(P("a"), F_OK));
    T("access rw", access(P("a"), R_OK | W_OK));
    T("access x file", access(P("a"), X_OK));
    T("access x dir", access(P("d"), X_OK));
    T("access missing", access(P("nope"), F_OK));
    T("faccessat", faccessat(dfd, "f", R_OK, 0));
    T("faccessat missing", faccessat(dfd, "nope", F_OK, 0));

    printf("== descriptors\n");
    TFD(fd, "open", open(P("c"), O_RDWR));
    TFD(fd2, "dup", dup(fd));
    T("lseek via dup", lseek(fd2, 2, SEEK_SET));
    T("offset shared", lseek(fd, 0, SEEK_CUR));
    fd3 = 200;
    T("dup2", dup2(fd, fd3));
    T("read via dup2", read(fd3, buf, 2));
    T("offset shared", lseek(fd, 0, SEEK_CUR));
    T("dup3 cloexec", dup3(fd, 201, O_CLOEXEC));
    T("F_GETFD dup3", fcntl(201, F_GETFD));
    T("dup3 same", dup3(fd, fd, 0));
    TFD(fd3, "dup2 same", dup2(fd, fd));
    fd3 = 200;
    T("close 201", close(201));
    T("F_GETFL", fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    T("F_SETFL append", fcntl(fd, F_SETFL, O_APPEND));
    T("F_GETFL", fcntl(fd, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    T("F_GETFL via dup", fcntl(fd2, F_GETFL) & (O_ACCMODE | O_APPEND | O_NONBLOCK));
    T("F_GETFD", fcntl(fd, F_GETFD));
    T("F_SETFD", fcntl(fd, F_SETFD, FD_CLOEXEC));
    T("F_GETFD", fcntl(fd, F_GETFD));
    T("F_GETFD dup", fcntl(fd2, F_GETFD));
    {
        int n = fcntl(fd, F_DUPFD, 150);
        printf("F_DUPFD >= 150: %s\n", n >= 150 ? "yes" : "no");
        T("close it", close(n));
        n = fcntl(fd, F_DUPFD_CLOEXEC, 160);
        printf("F_DUPFD_CLOEXEC >= 160: %s\n", n >= 160 ? "yes" : "no");
        T("F_GETFD of it", fcntl(n, F_GETFD));
        T("close it", close(n));
        struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        T("F_SETLK", fcntl(fd, F_SETLK, &fl));
        fl.l_type = F_RDLCK;
        T("F_GETLK", fcntl(fd, F_GETLK, &fl));
        printf("F_GETLK type unlocked: %s\n", fl.l_type == F_UNLCK ? "yes" : "no");
    }
    T("write appends via dup", write(fd2, "++", 2));
    T("close", close(fd));
    T("close", close(fd2));
    T("read after close", read(fd3, buf, 1));
    T("close", close(fd3));
    T("read closed", read(fd3, buf, 1));
    cat("c", P("c"));

    printf("== directories\n");
    T("mkdir d/e", mkdir(P("d/e"), 0700));
    T("mkdirat", mkdirat(dfd, "g", 0755));
    T("mkdirat exists", mkdirat(dfd, "g", 0755));
    show_stat("stat d/g", stat(P("d/g"), &st), &st);
    {
        DIR *d = opendir(P("d"));
        printf("opendir: %s\n", d ? "ok" : ename(errno));
        list("readdir d", d);
        rewinddir(d);
        list("after rewinddir", d);
        int f = dirfd(d);
        show_stat("fstat dirfd", fstat(f, &st), &st);
        T("closedir", closedir(d));
        d = opendir(P("nope"));
        printf("opendir missing: %s\n", d ? "ok" : ename(errno));
        d = opendir(P("a"));
        printf("opendir file: %s\n", d ? "ok" : ename(errno));
        int f2 = open(P("d"), O_RDONLY | O_DIRECTORY);
        d = fdopendir(f2);
        printf("fdopendir: %s\n", d ? "ok" : ename(errno));
        struct dirent64 *e;
        int n = 0;
        while ((e = readdir64(d)))
            n++;
        printf("readdir64 count %d\n", n);
        T("closedir", closedir(d));
        T("fd closed by closedir", fcntl(f2, F_GETFD));
        int f3 = open(P("a"), O_RDONLY);
        d = fdopendir(f3);
        printf("fdopendir file: %s\n", d ? "ok" : ename(errno));
        close(f3);
        d = opendir(base);
        list("readdir base", d);
        closedir(d);
    }
    T("rmdir nonempty", rmdir(P("d")));
    T("rmdir file", rmdir(P("a")));
    T("rmdir missing", rmdir(P("nope")));
    T("rmdir", rmdir(P("d/e")));
    T("unlink dir", unlink(P("d/g")));
    T("unlink missing", unlink(P("nope")));
    T("unlinkat removedir", unlinkat(dfd, "g", AT_REMOVEDIR));
    T("unlinkat file", unlinkat(dfd, "f", 0));
    T("unlinkat missing", unlinkat(dfd, "f", 0));
    T("unlink", unlink(P("sent")));
    show_stat("stat after unlink", stat(P("sent"), &st), &st);

    printf("== rename\n");
    T("rename", rename(P("copy"), P("copy2")));
    show_stat("old gone", stat(P("copy"), &st), &st);
    cat("new", P("copy2"));
    T("rename over file", rename(P("copy2"), P("b")));
    cat("b", P("b"));
    T("rename missing", rename(P("nope"), P("x")));
    T("mkdir r1", mkdir(P("r1"), 0755));
    T("mkdir r2", mkdir(P("r2"), 0755));
    T("mkdir r2/s", mkdir(P("r2/s"), 0755));
    T("rename dir over nonempty", rename(P("r1"), P("r2")));
    T("rename file over dir", rename(P("b"), P("r1")));
    T("rename dir over file", rename(P("r1"), P("b")));
    T("rename dir into itself", rename(P("r2"), P("r2/s/t")));
    T("rename dir over empty dir", rename(P("r2/s"), P("r1")));
    T("renameat", renameat(dfd, "../b", dfd, "moved"));
    cat("moved", P("d/moved"));
    T("renameat2 noreplace", renameat2(AT_FDCWD, P("a"), AT_FDCWD, P("c"), RENAME_NOREPLACE));
    T("renameat2 noreplace ok", renameat2(AT_FDCWD, P("a"), AT_FDCWD, P("a2"), RENAME_NOREPLACE));
    {
        DIR *d = opendir(base);
        list("readdir base", d);
        closedir(d);
    }

    printf("== stdio\n");
    {
        FILE *f = fopen(P("s"), "w");
        printf("fopen w: %s\n", f ? "ok" : ename(errno));
        fprintf(f, "line %d\n", 1);
        fputs("line 2\n", f);
        fwrite("line 3\n", 1, 7, f);
        T("fflush", fflush(f));
        T("fsync(fileno)", fsync(fileno(f)));
        T("fclose", fclose(f));
        f = fopen64(P("s"), "r+");
        printf("fopen64 r+: %s\n", f ? "ok" : ename(errno));
        char line[64];
        while (fgets(line, sizeof line, f))
            printf("fgets: %s", line);
        T("fseek", fseek(f, 5, SEEK_SET));
        T("ftell", ftell(f));
        T("fputc", fputc('X', f));
        T("fseek end", fseek(f, 0, SEEK_END));
        T("ftell end", ftell(f));
        rewind(f);
        size_t n = fread(line, 1, sizeof line - 1, f);
        line[n] = 0;
        printf("fread %zu: %s", n, line);
        T("fclose", fclose(f));
        f = fopen(P("s"), "a");
        fputs("appended\n", f);
        fclose(f);
        cat("s", P("s"));
        f = fopen(P("nope/x"), "w");
        printf("fopen missing dir: %s\n", f ? "ok" : ename(errno));
        f = fopen(P("nope"), "r");
        printf("fopen missing: %s\n", f ? "ok" : ename(errno));
        f = fopen(P("s"), "wx");
        printf("fopen wx exists: %s\n", f ? "ok" : ename(errno));
        int fd4 = open(P("s"), O_RDWR);
        f = fdopen(fd4, "r+");
        printf("fdopen: %s\n", f ? "ok" : ename(errno));
        printf("fileno matches: %s\n", fileno(f) == fd4 ? "yes" : "no");
        n = fread(line, 1, 6, f);
        line[n] = 0;
        printf("fdopen fread: %s\n", line);
        T("fclose", fclose(f));
        T("fd closed by fclose", fcntl(fd4, F_GETFD));
    }

    printf("== mmap\n");
    {
        int mf = open(P("c"), O_RDONLY);
        struct stat ms;
        fstat(mf, &ms);
        char *m = mmap(NULL, ms.st_size, PROT_READ, MAP_PRIVATE, mf, 0);
        printf("mmap private read: %s\n", m == MAP_FAILED ? ename(errno) : "ok");
        if (m != MAP_FAILED) {
            printf("mmap data: %.*s\n", (int)ms.st_size, m);
            munmap(m, ms.st_size);
        }
        m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, mf, 0);
        printf("mmap private write: %s\n", m == MAP_FAILED ? ename(errno) : "ok");
        if (m != MAP_FAILED) {
            m[0] = '#';
            printf("mmap past the end of the file reads zero: %s\n", m[ms.st_size] == 0 && m[4095] == 0 ? "yes" : "no");
            munmap(m, 4096);
        }
        cat("c unchanged by a private mapping", P("c"));
        m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, mf, 100);
        printf("mmap unaligned offset: %s\n", m == MAP_FAILED ? ename(errno) : "ok");
        close(mf);
        int wf = open(P("c"), O_WRONLY);
        m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, wf, 0);
        printf("mmap of a write-only descriptor: %s\n", m == MAP_FAILED ? ename(errno) : "ok");
        close(wf);
    }

    printf("== realpath\n");
    {
        char rp[PATH_MAX];
        char *r = realpath(P("d/../d/./moved"), rp);
        printf("realpath: %s\n", r && strncmp(r, base, strlen(base)) == 0 ? r + strlen(base) : "?");
        r = realpath(P("nope/x"), rp);
        printf("realpath missing: %s\n", r ? "found" : ename(errno));
        r = canonicalize_file_name(P("d//"));
        printf("canonicalize_file_name: %s\n", r && strncmp(r, base, strlen(base)) == 0 ? r + strlen(base) : "?");
        free(r);
    }

    printf("== working directory\n");
    {
        char cwd[4096], old[4096];
        getcwd(old, sizeof old);
        int here = open(".", O_RDONLY | O_DIRECTORY);
        T("chdir", chdir(P("d")));
        char *c = getcwd(cwd, sizeof cwd);
        printf("getcwd: %s\n", c && strncmp(c, base, strlen(base)) == 0 ? c + strlen(base) : "?");
        cat("relative", "moved");
        TFD(fd, "open relative", open("rel", O_CREAT | O_WRONLY, 0644));
        T("write", write(fd, "R", 1));
        T("close", close(fd));
        show_stat("stat relative", stat("rel", &st), &st);
        T("chdir ..", chdir(".."));
        c = getcwd(NULL, 0);
        printf("getcwd malloc: %s\n", c && strncmp(c, base, strlen(base)) == 0 ? (c[strlen(base)] ? c + strlen(base) : "(base)") : "?");
        free(c);
        cat("relative from base", "d/rel");
        T("getcwd small", getcwd(cwd, 2) == NULL ? -1 : 0);
        T("fchdir", fchdir(dfd));
        cat("after fchdir", "rel");
        T("chdir missing", chdir(P("nope")));
        T("chdir file", chdir(P("a2")));
        T("fchdir back", fchdir(here));
        c = getcwd(cwd, sizeof cwd);
        printf("back home: %s\n", c && strcmp(c, old) == 0 ? "yes" : "no");
        close(here);
    }
    T("close dfd", close(dfd));
    printf("== end\n");
    return 0;
}
