/* Shared helpers of the WSP test workloads: a deterministic generator, a 64-bit mixer, argument
 * parsing that refuses bad input, and the digest output (stdout and a file).
 *
 * Every workload is deterministic: the same arguments give the same digest, whatever the
 * scheduling, so an interrupted-and-resumed run can be compared bit for bit with an
 * uninterrupted one. None of them keeps state outside its memory: run from scratch, a workload
 * simply recomputes (its own restart logic). */
#ifndef WL_H
#define WL_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline uint64_t wl_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* splitmix64 finalizer: a bijective 64-bit mixer. */
static inline uint64_t wl_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* xorshift64* generator; the state must not be 0. */
static inline uint64_t wl_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dULL;
}

__attribute__((unused)) static void wl_die(const char *prog, const char *msg, const char *arg) {
    fprintf(stderr, "%s: %s%s%s\n", prog, msg, arg ? ": " : "", arg ? arg : "");
    exit(2);
}

/* A positive decimal number in [lo, hi], or exit 2 naming the option. */
__attribute__((unused)) static uint64_t wl_num(const char *prog, const char *opt, const char *text, uint64_t lo,
                       uint64_t hi) {
    char *end = NULL;
    errno = 0;
    if (text == NULL || *text == '\0' || *text == '-')
        wl_die(prog, "missing or negative number after", opt);
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects a number in [%" PRIu64 ", %" PRIu64 "], found `%s`\n",
                prog, opt, lo, hi, text);
        exit(2);
    }
    return (uint64_t)v;
}

/* Write every byte or fail. */
__attribute__((unused)) static int wl_write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Print the result line on stdout and write it to `out` (created or truncated). */
__attribute__((unused)) static int wl_report(const char *prog, const char *out, const char *line) {
    size_t len = strlen(line);
    if (wl_write_all(1, line, len) != 0) {
        fprintf(stderr, "%s: writing stdout: %s\n", prog, strerror(errno));
        return 1;
    }
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, out, strerror(errno));
        return 1;
    }
    if (wl_write_all(fd, line, len) != 0 || fsync(fd) != 0 || close(fd) != 0) {
        fprintf(stderr, "%s: writing %s: %s\n", prog, out, strerror(errno));
        return 1;
    }
    return 0;
}

/* Append a line "start" to `path`: a program that is resumed (not restarted) writes it once,
 * whatever the number of power failures. */
__attribute__((unused)) static void wl_mark_start(const char *prog, const char *path) {
    if (path == NULL)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || wl_write_all(fd, "start\n", 6) != 0 || close(fd) != 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
        exit(1);
    }
}

/* A line on stderr, with raw write (no stdio buffer that a resume could replay). */
__attribute__((unused)) static void wl_progress(const char *prog, const char *what, uint64_t done, uint64_t total) {
    char line[160];
    int n = snprintf(line, sizeof line, "%s: %s %" PRIu64 "/%" PRIu64 "\n", prog, what, done,
                     total);
    if (n > 0)
        (void)wl_write_all(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

#endif
