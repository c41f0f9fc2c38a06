/* hashchain_mt: the hash chain split across T pthreads, a WSP test workload.
 *
 *   hashchain_mt [-t THREADS] [-m MIB] [-r ROUNDS] [-p] [-s STARTS] OUT
 *
 * The buffer (MIB MiB, default 16) is cut into THREADS (default 4) slices. In every round each
 * thread chains over its own slice, starting from its own and its right neighbour's digests of
 * the round before; a barrier ends the round. After ROUNDS (default 64) rounds the threads are
 * joined and their digests combined in thread order, so the result does not depend on the
 * scheduling. ROUNDS 0 runs until killed. The result line goes to stdout and to OUT.
 * With -s, a line "start" is appended to STARTS when main begins (a resumed program does
 * not begin again).
 * Exit: 0 done, 1 output error, 2 bad arguments or no memory/threads. */
#include <pthread.h>

#include "wl.h"

static const char *PROG = "hashchain_mt";

#define MAX_THREADS 64

static uint64_t *buf;
static size_t slice_words;
static uint64_t nthreads, rounds;
static int progress;
static uint64_t digest[2][MAX_THREADS];
static pthread_barrier_t barrier;

static void *worker(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t *mine = buf + id * slice_words;
    uint64_t step = rounds >= 10 ? rounds / 10 : 1;
    for (uint64_t r = 0; rounds == 0 || r < rounds; r++) {
        const uint64_t *prev = digest[(r + 1) % 2];
        uint64_t h = wl_mix(prev[id] ^ wl_rotl(prev[(id + 1) % nthreads], 17) ^ r);
        for (size_t i = 0; i < slice_words; i++) {
            h = wl_mix(h ^ mine[i]);
            mine[i] ^= h;
        }
        digest[r % 2][id] = h;
        pthread_barrier_wait(&barrier);
        if (progress && id == 0 && (r + 1) % step == 0)
            wl_progress(PROG, "round", r + 1, rounds);
    }
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: %s [-t THREADS] [-m MIB] [-r ROUNDS] [-p] [-s STARTS] OUT\n", PROG);
    exit(2);
}

int main(int argc, char **argv) {
    const char *starts = NULL;
    uint64_t mib = 16;
    int opt;
    nthreads = 4;
    rounds = 64;
    while ((opt = getopt(argc, argv, "t:m:r:ps:")) != -1) {
        switch (opt) {
        case 't': nthreads = wl_num(PROG, "-t", optarg, 1, MAX_THREADS); break;
        case 'm': mib = wl_num(PROG, "-m", optarg, 1, 65536); break;
        case 'r': rounds = wl_num(PROG, "-r", optarg, 0, 1000000000); break;
        case 'p': progress = 1; break;
        case 's': starts = optarg; break;
        default: usage();
        }
    }
    if (optind != argc - 1)
        usage();
    const char *out = argv[optind];
    wl_mark_start(PROG, starts);
    slice_words = (size_t)(mib << 20) / sizeof(uint64_t) / nthreads;
    if (slice_words == 0)
        wl_die(PROG, "the buffer is smaller than one word per thread", NULL);
    buf = malloc(slice_words * nthreads * sizeof(uint64_t));
    if (buf == NULL)
        wl_die(PROG, "out of memory for the buffer", NULL);
    uint64_t s = 0x5eed0000a11ce5ULL;
    for (size_t i = 0; i < slice_words * nthreads; i++)
        buf[i] = wl_next(&s);
    for (uint64_t t = 0; t < nthreads; t++)
        digest[1][t] = wl_mix(t);
    if (pthread_barrier_init(&barrier, NULL, (unsigned)nthreads) != 0)
        wl_die(PROG, "pthread_barrier_init failed", NULL);
    pthread_t tids[MAX_THREADS];
    for (uint64_t t = 1; t < nthreads; t++) {
        int e = pthread_create(&tids[t], NULL, worker, (void *)(uintptr_t)t);
        if (e != 0)
            wl_die(PROG, "pthread_create failed", strerror(e));
    }
    worker((void *)(uintptr_t)0);
    for (uint64_t t = 1; t < nthreads; t++)
        pthread_join(tids[t], NULL);
    uint64_t h = 0;
    const uint64_t *last = digest[(rounds + 1) % 2];
    for (uint64_t t = 0; t < nthreads; t++)
        h = wl_mix(h ^ last[t]);
    uint64_t fold = 0;
    for (size_t i = 0; i < slice_words * nthreads; i++)
        fold = wl_rotl(fold, 7) ^ buf[i];
    char line[200];
    snprintf(line, sizeof line,
             "hashchain_mt threads=%" PRIu64 " mib=%" PRIu64 " rounds=%" PRIu64
             " digest=%016" PRIx64 "%016" PRIx64 "\n",
             nthreads, mib, rounds, h, fold);
    return wl_report(PROG, out, line);
}
