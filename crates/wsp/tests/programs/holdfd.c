/* holdfd: a program that holds kernel objects WSP cannot restore, a WSP test workload.
 *
 *   holdfd [-k pipe|socket|both] [-s SECONDS] OUT
 *
 * Opens a pipe, an AF_UNIX socket pair, or both (default both), keeps them open while it
 * computes a hash chain for about SECONDS (default 2, checked against the clock every few
 * thousand steps), then writes a result line to stdout and OUT. Under `kavach wsp`, a save taken
 * while it runs must name these objects as not restorable.
 * Exit: 0 done, 1 output error, 2 bad arguments or the objects could not be made. */
#include <sys/socket.h>
#include <time.h>

#include "wl.h"

static const char *PROG = "holdfd";

static void usage(void) {
    fprintf(stderr, "usage: %s [-k pipe|socket|both] [-s SECONDS] OUT\n", PROG);
    exit(2);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *kind = "both";
    uint64_t seconds = 2;
    int opt;
    while ((opt = getopt(argc, argv, "k:s:")) != -1) {
        switch (opt) {
        case 'k': kind = optarg; break;
        case 's': seconds = wl_num(PROG, "-s", optarg, 1, 3600); break;
        default: usage();
        }
    }
    if (optind != argc - 1)
        usage();
    int want_pipe = strcmp(kind, "pipe") == 0 || strcmp(kind, "both") == 0;
    int want_sock = strcmp(kind, "socket") == 0 || strcmp(kind, "both") == 0;
    if (!want_pipe && !want_sock)
        wl_die(PROG, "-k expects pipe, socket or both, found", kind);
    int p[2] = {-1, -1}, sv[2] = {-1, -1};
    if (want_pipe && pipe(p) != 0)
        wl_die(PROG, "pipe failed", strerror(errno));
    if (want_sock && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        wl_die(PROG, "socketpair failed", strerror(errno));
    double end = now() + (double)seconds;
    uint64_t h = 1, steps = 0;
    while (1) {
        h = wl_mix(h ^ steps);
        if (++steps % 4096 == 0 && now() >= end)
            break;
    }
    char line[128];
    snprintf(line, sizeof line, "holdfd kind=%s pipe=%d socket=%d done\n", kind, p[0], sv[0]);
    (void)h;
    return wl_report(PROG, argv[optind], line);
}
