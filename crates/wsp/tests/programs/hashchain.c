/* hashchain: a single-threaded hash chain over a buffer, a WSP test workload.
 *
 *   hashchain [-m MIB] [-w MIB] [-r ROUNDS] [-l LOG] [-p] [-s STARTS] OUT
 *
 * Fills MIB MiB (default 16) from a fixed seed, then runs ROUNDS (default 64) passes of a hash
 * chain over it: every 64-bit word is folded into the running value, which is written back
 * into the word, so each pass dirties the whole buffer and depends on the pass before.
 * ROUNDS 0 runs until killed (for save-time measurements). With -w, the passes cover only the
 * first W MiB (the working set); the fill still writes all of the buffer. The result line
 * goes to stdout and to OUT. With -l, one line per pass is written to LOG through a descriptor opened at the start
 * (so a resume must reopen it at its offset). -p prints progress on stderr.
 * With -s, a line "start" is appended to STARTS when main begins (a resumed program does
 * not begin again).
 * Exit: 0 done, 1 output error, 2 bad arguments or no memory. */
#include "wl.h"

static const char *PROG = "hashchain";

static void usage(void) {
    fprintf(stderr, "usage: %s [-m MIB] [-w MIB] [-r ROUNDS] [-l LOG] [-p] [-s STARTS] OUT\n", PROG);
    exit(2);
}

int main(int argc, char **argv) {
    const char *starts = NULL;
    uint64_t mib = 16, rounds = 64, work_mib = 0;
    const char *log = NULL;
    int progress = 0, opt;
    while ((opt = getopt(argc, argv, "m:w:r:l:ps:")) != -1) {
        switch (opt) {
        case 'm': mib = wl_num(PROG, "-m", optarg, 1, 65536); break;
        case 'w': work_mib = wl_num(PROG, "-w", optarg, 1, 65536); break;
        case 'r': rounds = wl_num(PROG, "-r", optarg, 0, 1000000000); break;
        case 'l': log = optarg; break;
        case 'p': progress = 1; break;
        case 's': starts = optarg; break;
        default: usage();
        }
    }
    if (optind != argc - 1)
        usage();
    const char *out = argv[optind];
    wl_mark_start(PROG, starts);
    int logfd = -1;
    if (log != NULL) {
        logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (logfd < 0) {
            fprintf(stderr, "%s: %s: %s\n", PROG, log, strerror(errno));
            return 1;
        }
    }
    if (work_mib > mib)
        wl_die(PROG, "-w (the working set) is larger than -m (the buffer)", NULL);
    size_t words = (size_t)(mib << 20) / sizeof(uint64_t);
    size_t work = work_mib ? (size_t)(work_mib << 20) / sizeof(uint64_t) : words;
    uint64_t *buf = malloc(words * sizeof(uint64_t));
    if (buf == NULL)
        wl_die(PROG, "out of memory for the buffer", NULL);
    uint64_t s = 0x5eed0000a11ce5ULL;
    for (size_t i = 0; i < words; i++)
        buf[i] = wl_next(&s);
    uint64_t h = 0;
    uint64_t step = rounds >= 10 ? rounds / 10 : 1;
    for (uint64_t r = 0; rounds == 0 || r < rounds; r++) {
        h = wl_mix(h ^ r);
        for (size_t i = 0; i < work; i++) {
            h = wl_mix(h ^ buf[i]);
            buf[i] ^= h;
        }
        if (logfd >= 0) {
            char line[64];
            int n = snprintf(line, sizeof line, "round %" PRIu64 " %016" PRIx64 "\n", r, h);
            if (wl_write_all(logfd, line, (size_t)n) != 0) {
                fprintf(stderr, "%s: writing %s: %s\n", PROG, log, strerror(errno));
                return 1;
            }
        }
        if (progress && (r + 1) % step == 0)
            wl_progress(PROG, "round", r + 1, rounds);
    }
    uint64_t fold = 0;
    for (size_t i = 0; i < words; i++)
        fold = wl_rotl(fold, 7) ^ buf[i];
    if (logfd >= 0 && close(logfd) != 0) {
        fprintf(stderr, "%s: closing %s: %s\n", PROG, log, strerror(errno));
        return 1;
    }
    char line[160];
    snprintf(line, sizeof line,
             "hashchain mib=%" PRIu64 "%s rounds=%" PRIu64 " digest=%016" PRIx64 "%016" PRIx64 "\n",
             mib, work_mib ? " (working set part)" : "", rounds, h, fold);
    return wl_report(PROG, out, line);
}
