/* sortsum: sort a large pseudo-random array, a WSP test workload.
 *
 *   sortsum [-n MILLIONS] [-r ROUNDS] [-p] [-s STARTS] OUT
 *
 * Fills MILLIONS x 2^20 (default 4) 64-bit keys from a fixed seed and sorts them with a
 * bottom-up merge sort (its own, over a second buffer of the same size). Each further round
 * scrambles the sorted keys with a round-dependent mix and sorts again. The digest folds the
 * sorted keys of every round; the program checks the order itself. The result line goes to
 * stdout and to OUT.
 * With -s, a line "start" is appended to STARTS when main begins (a resumed program does
 * not begin again).
 * Exit: 0 done, 1 output error or a sort that is out of order, 2 bad arguments or no memory. */
#include "wl.h"

static const char *PROG = "sortsum";

static void merge_sort(uint64_t *a, uint64_t *tmp, size_t n) {
    uint64_t *src = a, *dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = src[j] < src[i] ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, n * sizeof(uint64_t));
}

static void usage(void) {
    fprintf(stderr, "usage: %s [-n MILLIONS] [-r ROUNDS] [-p] [-s STARTS] OUT\n", PROG);
    exit(2);
}

int main(int argc, char **argv) {
    const char *starts = NULL;
    uint64_t millions = 4, rounds = 3;
    int progress = 0, opt;
    while ((opt = getopt(argc, argv, "n:r:ps:")) != -1) {
        switch (opt) {
        case 'n': millions = wl_num(PROG, "-n", optarg, 1, 4096); break;
        case 'r': rounds = wl_num(PROG, "-r", optarg, 1, 1000000); break;
        case 'p': progress = 1; break;
        case 's': starts = optarg; break;
        default: usage();
        }
    }
    if (optind != argc - 1)
        usage();
    const char *out = argv[optind];
    wl_mark_start(PROG, starts);
    size_t n = (size_t)(millions << 20);
    uint64_t *a = malloc(n * sizeof(uint64_t));
    uint64_t *tmp = malloc(n * sizeof(uint64_t));
    if (a == NULL || tmp == NULL)
        wl_die(PROG, "out of memory for the arrays", NULL);
    uint64_t s = 0x50a7c0de5eedULL;
    for (size_t i = 0; i < n; i++)
        a[i] = wl_next(&s);
    uint64_t h = 0;
    for (uint64_t r = 0; r < rounds; r++) {
        if (r > 0)
            for (size_t i = 0; i < n; i++)
                a[i] = wl_mix(a[i] ^ wl_mix(r + i));
        merge_sort(a, tmp, n);
        for (size_t i = 0; i < n; i++) {
            if (i > 0 && a[i - 1] > a[i]) {
                fprintf(stderr, "%s: round %" PRIu64 ": keys %zu and %zu out of order\n", PROG,
                        r, i - 1, i);
                return 1;
            }
            h = wl_mix(h ^ a[i]);
        }
        if (progress)
            wl_progress(PROG, "round", r + 1, rounds);
    }
    char line[160];
    snprintf(line, sizeof line,
             "sortsum keys=%zu rounds=%" PRIu64 " min=%016" PRIx64 " max=%016" PRIx64
             " digest=%016" PRIx64 "\n",
             n, rounds, a[0], a[n - 1], h);
    return wl_report(PROG, out, line);
}
