/* Threads sharing one namespace: each thread creates its own file, writes it in 4 KiB pieces
 * with pwrite in a scrambled order while opening, dup'ing and closing other descriptors and
 * stat'ing kernel files, then fsyncs. "threads write DIR T" then "threads verify DIR T" (in a
 * later process) checks every byte. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIECES 64
#define PIECE 4096

static const char *dir;

static void fill(unsigned char *b, int t, int piece) {
    for (int i = 0; i < PIECE; i++)
        b[i] = (unsigned char)(t * 37 + piece * 11 + i);
}

static void *writer(void *arg) {
    int t = (int)(long)arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/t%d", dir, t);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return (void *)1; }
    unsigned char b[PIECE];
    for (int k = 0; k < PIECES; k++) {
        int piece = (k * 29 + t) % PIECES;
        fill(b, t, piece);
        if (pwrite(fd, b, PIECE, (off_t)piece * PIECE) != PIECE) { perror("pwrite"); return (void *)1; }
        int d = dup(fd);
        struct stat st;
        if (d < 0 || fstat(d, &st) || close(d)) { perror("dup/fstat/close"); return (void *)1; }
        if (stat("/", &st)) { perror("stat /"); return (void *)1; }
    }
    if (fsync(fd) || close(fd)) { perror("fsync"); return (void *)1; }
    return NULL;
}

static int verify(int t) {
    char path[4096];
    snprintf(path, sizeof path, "%s/t%d", dir, t);
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); return 1; }
    unsigned char b[PIECE], w[PIECE];
    for (int piece = 0; piece < PIECES; piece++) {
        if (read(fd, b, PIECE) != PIECE) { printf("short t%d piece %d\n", t, piece); return 1; }
        fill(w, t, piece);
        if (memcmp(b, w, PIECE)) { printf("bad t%d piece %d\n", t, piece); return 1; }
    }
    char extra;
    if (read(fd, &extra, 1) != 0) { printf("long t%d\n", t); return 1; }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    dir = argv[2];
    int n = atoi(argv[3]);
    if (n < 1 || n > 64) return 2;
    if (!strcmp(argv[1], "write")) {
        pthread_t th[64];
        for (int t = 0; t < n; t++)
            pthread_create(&th[t], NULL, writer, (void *)(long)t);
        int bad = 0;
        for (int t = 0; t < n; t++) {
            void *r;
            pthread_join(th[t], &r);
            bad |= r != NULL;
        }
        if (bad) return 1;
    }
    for (int t = 0; t < n; t++)
        if (verify(t)) return 1;
    printf("%d files verified\n", n);
    return 0;
}
