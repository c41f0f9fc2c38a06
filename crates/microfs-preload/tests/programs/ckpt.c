/* A checkpoint writer and reader, as an application would use the checkpoint directory.
 *   ckpt write DIR N SIZE   write DIR/rank.N files of SIZE bytes (a pattern of the rank and the
 *                           offset), each with write + fsync, via stdio for even ranks and
 *                           POSIX calls for odd ones; then DIR/done with "N SIZE"
 *   ckpt read DIR           read DIR/done and verify every file; prints "verified N files"
 *   ckpt loop DIR SIZE      write DIR/step.K files (K = 0, 1, ...) forever, printing
 *                           "synced K" after each file's fsync returned
 *   ckpt check DIR K SIZE   verify step.0 .. step.K (what "synced" said) are intact
 * Exit 0 on success, 1 on a mismatch (with a message), 2 on a usage or system error. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned char pat(long id, long off) { return (unsigned char)((id * 131 + off * 7 + (off >> 11)) & 0xff); }

static void fill(unsigned char *b, long id, long off, long n) {
    for (long i = 0; i < n; i++)
        b[i] = pat(id, off + i);
}

static int write_one(const char *path, long id, long size, int use_stdio) {
    unsigned char buf[65536];
    if (use_stdio) {
        FILE *f = fopen(path, "w");
        if (!f) { perror(path); return 2; }
        for (long off = 0; off < size; off += sizeof buf) {
            long n = size - off < (long)sizeof buf ? size - off : (long)sizeof buf;
            fill(buf, id, off, n);
            if (fwrite(buf, 1, n, f) != (size_t)n) { perror("fwrite"); return 2; }
        }
        if (fflush(f) || fsync(fileno(f))) { perror("fsync"); return 2; }
        if (fclose(f)) { perror("fclose"); return 2; }
        return 0;
    }
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return 2; }
    for (long off = 0; off < size; off += sizeof buf) {
        long n = size - off < (long)sizeof buf ? size - off : (long)sizeof buf;
        fill(buf, id, off, n);
        if (write(fd, buf, n) != n) { perror("write"); return 2; }
    }
    if (fsync(fd) || close(fd)) { perror("fsync/close"); return 2; }
    return 0;
}

static int verify_one(const char *path, long id, long size) {
    unsigned char buf[65536], want[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0) { printf("MISSING %s: %s\n", path, strerror(errno)); return 1; }
    struct stat st;
    if (fstat(fd, &st) || st.st_size != size) {
        printf("SIZE %s: %lld, expected %ld\n", path, (long long)st.st_size, size);
        return 1;
    }
    long off = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0) { perror("read"); return 2; }
        if (n == 0) break;
        fill(want, id, off, n);
        if (memcmp(buf, want, n)) { printf("DATA %s: differs in [%ld, %ld)\n", path, off, off + n); return 1; }
        off += n;
    }
    close(fd);
    if (off != size) { printf("SHORT %s: %ld of %ld\n", path, off, size); return 1; }
    return 0;
}

int main(int argc, char **argv) {
    char path[4096];
    if (argc == 5 && !strcmp(argv[1], "write")) {
        long n = atol(argv[3]), size = atol(argv[4]);
        for (long r = 0; r < n; r++) {
            snprintf(path, sizeof path, "%s/rank.%ld", argv[2], r);
            int e = write_one(path, r, size, r % 2 == 0);
            if (e) return e;
        }
        snprintf(path, sizeof path, "%s/done", argv[2]);
        FILE *f = fopen(path, "w");
        if (!f) { perror(path); return 2; }
        fprintf(f, "%ld %ld\n", n, size);
        if (fclose(f)) return 2;
        printf("wrote %ld files\n", n);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "read")) {
        snprintf(path, sizeof path, "%s/done", argv[2]);
        FILE *f = fopen(path, "r");
        long n, size;
        if (!f || fscanf(f, "%ld %ld", &n, &size) != 2) { printf("no done file\n"); return 1; }
        fclose(f);
        for (long r = 0; r < n; r++) {
            snprintf(path, sizeof path, "%s/rank.%ld", argv[2], r);
            int e = verify_one(path, r, size);
            if (e) return e;
        }
        printf("verified %ld files\n", n);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "loop")) {
        long size = atol(argv[3]);
        setvbuf(stdout, NULL, _IOLBF, 0);
        for (long k = 0;; k++) {
            snprintf(path, sizeof path, "%s/step.%ld", argv[2], k);
            int e = write_one(path, k, size, k % 2 == 0);
            if (e) return e;
            printf("synced %ld\n", k);
        }
    }
    if (argc == 5 && !strcmp(argv[1], "check")) {
        long k = atol(argv[3]), size = atol(argv[4]);
        for (long i = 0; i <= k; i++) {
            snprintf(path, sizeof path, "%s/step.%ld", argv[2], i);
            int e = verify_one(path, i, size);
            if (e) return e;
        }
        printf("verified %ld files\n", k + 1);
        return 0;
    }
    fprintf(stderr, "usage: ckpt write DIR N SIZE | read DIR | loop DIR SIZE | check DIR K SIZE\n");
    return 2;
}
