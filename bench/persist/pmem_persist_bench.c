/*
 * pmem_persist_bench -- libpmem side of Kavach's persist-latency benchmark.
 *
 * Usage:
 *   PMEM_IS_PMEM_FORCE=1 pmem_persist_bench --file /dev/shm/x.pmem \
 *       --sizes 64,128,256,512,1024,2048,4096 --iters 200000 --rounds 7
 *
 * Method (the Rust side, `kavach-bench --bin persist_bench`, mirrors it):
 *   - map PATH with pmem_map_file(PATH, 64 MiB, PMEM_FILE_CREATE, 0600),
 *     then prefault it with one plain memset so no page fault is timed;
 *   - for each round, for each size (round-major, so size drift is spread):
 *       stride = size rounded up to 4096; the target address walks
 *       base, base+stride, base+2*stride, ... and wraps to base when the
 *       next range would pass the end of the mapping;
 *       * store-only loop: `iters` x { volatile u64 store of the iteration
 *         counter to the first 8 bytes of the target range }
 *       * persist loop:    `iters` x { same store; pmem_persist(addr, size) }
 *       each loop is preceded by an untimed warm-up of min(iters, 1000)
 *       iterations of the same body, and timed as a whole with
 *       clock_gettime(CLOCK_MONOTONIC);
 *   - one stdout line per (size, round):
 *       libpmem SIZE ROUND NS_PER_OP STORE_ONLY_NS_PER_OP
 *     ROUND counts from 1. Nothing else is written to stdout; diagnostics
 *     (mapping, which flush instruction libpmem uses) go to stderr.
 *
 * Exit codes: 0 ok, 2 bad arguments, 1 runtime failure (mapping, clock).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <inttypes.h>
#include <libpmem.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAP_LEN ((size_t)64 << 20)
#define PAGE 4096u
#define MAX_SIZES 64
#define MAX_ITERS 10000000000ULL /* 1e10: keeps ns counts far from overflow */
#define MAX_ROUNDS 100000ULL
#define WARMUP_ITERS 1000ULL

static const char *prog = "pmem_persist_bench";

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s --file PATH --sizes S1,S2,... --iters N --rounds R\n"
		"  --file PATH   file to create/map (64 MiB), e.g. /dev/shm/x.pmem\n"
		"  --sizes LIST  comma-separated persist sizes in bytes, each in\n"
		"                [8, %zu]\n"
		"  --iters N     iterations per timed loop, 1..%llu\n"
		"  --rounds R    rounds, 1..%llu\n"
		"prints 'libpmem SIZE ROUND NS_PER_OP STORE_ONLY_NS_PER_OP' lines.\n"
		"Set PMEM_IS_PMEM_FORCE=1 when PATH is on tmpfs (/dev/shm).\n",
		prog, MAP_LEN, MAX_ITERS, MAX_ROUNDS);
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", prog);
	fprintf(stderr, fmt, arg ? arg : "");
	fputc('\n', stderr);
	usage(stderr);
	exit(2);
}

/* Strict unsigned decimal parse: digits only, no sign, no trailing junk. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (len == 0)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int parse_sizes(const char *s, size_t *sizes, size_t *nsizes)
{
	size_t n = 0;
	const char *p = s;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		uint64_t v;
		if (parse_u64(p, len, &v) != 0)
			return -1;
		if (v < 8 || v > MAP_LEN)
			return -2;
		if (n == MAX_SIZES)
			return -3;
		sizes[n++] = (size_t)v;
		if (!comma)
			break;
		p = comma + 1;
	}
	*nsizes = n;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
		fprintf(stderr, "%s: clock_gettime: %s\n", prog, strerror(errno));
		exit(1);
	}
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * One loop over `iters` targets. `do_persist` is a compile-time constant at
 * both call sites (the function is inlined), so the store-only variant has
 * no branch left in its body. Returns elapsed ns (0 if !timed).
 */
static inline __attribute__((always_inline)) uint64_t
run_loop(char *base, size_t span, size_t stride, size_t size, uint64_t iters,
	 int do_persist)
{
	size_t off = 0;
	/* untimed warm-up: PLT resolution, branch predictors, TLB */
	uint64_t warm = iters < WARMUP_ITERS ? iters : WARMUP_ITERS;
	for (uint64_t i = 0; i < warm; i++) {
		char *p = base + off;
		*(volatile uint64_t *)p = i;
		if (do_persist)
			pmem_persist(p, size);
		off += stride;
		if (off >= span)
			off = 0;
	}

	off = 0;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < iters; i++) {
		char *p = base + off;
		*(volatile uint64_t *)p = i;
		if (do_persist)
			pmem_persist(p, size);
		off += stride;
		if (off >= span)
			off = 0;
	}
	uint64_t t1 = now_ns();
	return t1 - t0;
}

static __attribute__((noinline)) uint64_t
loop_store_only(char *base, size_t span, size_t stride, size_t size,
		uint64_t iters)
{
	return run_loop(base, span, stride, size, iters, 0);
}

static __attribute__((noinline)) uint64_t
loop_persist(char *base, size_t span, size_t stride, size_t size,
	     uint64_t iters)
{
	return run_loop(base, span, stride, size, iters, 1);
}

static int env_is(const char *name, const char *val)
{
	const char *e = getenv(name);
	return e && strcmp(e, val) == 0;
}

/*
 * libpmem does not expose its flush choice, and its release build does not
 * log (PMEM_LOG_LEVEL only works with the pmdk_dbg build). Reproduce
 * libpmem 1.12's rule from pmem2_arch_init/pmem_cpuinfo_to_funcs: the best
 * of clwb > clflushopt > clflush present in CPUID, minus those disabled by
 * PMEM_NO_CLWB=1 / PMEM_NO_CLFLUSHOPT=1; flushing is skipped entirely if
 * PMEM_NO_FLUSH=1 or (unless PMEM_NO_FLUSH=0) the platform reports eADR.
 * Verified against the pmdk_dbg build's "using clwb" log line.
 */
static void report_flush_choice(void)
{
	unsigned a, b, c, d;
	int has_clflush = 0, has_clflushopt = 0, has_clwb = 0;
	if (__get_cpuid(1, &a, &b, &c, &d))
		has_clflush = (d & (1u << 19)) != 0;
	if (__get_cpuid_max(0, NULL) >= 7) {
		__cpuid_count(7, 0, a, b, c, d);
		has_clflushopt = (b & (1u << 23)) != 0;
		has_clwb = (b & (1u << 24)) != 0;
	}
	const char *insn = "none (no clflush in CPUID)";
	if (has_clflush)
		insn = "clflush";
	if (has_clflushopt && !env_is("PMEM_NO_CLFLUSHOPT", "1"))
		insn = "clflushopt";
	if (has_clwb && !env_is("PMEM_NO_CLWB", "1"))
		insn = "clwb";

	int auto_flush = pmem_has_auto_flush();
	const char *mode;
	if (env_is("PMEM_NO_FLUSH", "1"))
		mode = "NOT flushing (PMEM_NO_FLUSH=1): pmem_persist = sfence only";
	else if (env_is("PMEM_NO_FLUSH", "0"))
		mode = "flushing (forced by PMEM_NO_FLUSH=0)";
	else if (auto_flush == 1)
		mode = "NOT flushing (eADR reported): pmem_persist = sfence only";
	else
		mode = "flushing (no eADR reported)";
	fprintf(stderr,
		"%s: cpuid clflush=%d clflushopt=%d clwb=%d; libpmem flush "
		"instruction (inferred): %s + sfence; %s; pmem_has_auto_flush=%d\n",
		prog, has_clflush, has_clflushopt, has_clwb, insn, mode,
		auto_flush);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	const char *sizes_arg = NULL, *iters_arg = NULL, *rounds_arg = NULL;
	size_t sizes[MAX_SIZES];
	size_t nsizes = 0;
	uint64_t iters = 0, rounds = 0;

	if (argc > 0 && argv[0] && argv[0][0]) {
		const char *slash = strrchr(argv[0], '/');
		prog = slash ? slash + 1 : argv[0];
	}

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i];
		const char **dst = NULL;
		if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(opt, "--file") == 0) {
			dst = &path;
		} else if (strcmp(opt, "--sizes") == 0) {
			dst = &sizes_arg;
		} else if (strcmp(opt, "--iters") == 0) {
			dst = &iters_arg;
		} else if (strcmp(opt, "--rounds") == 0) {
			dst = &rounds_arg;
		} else {
			die_usage("unknown argument '%s'", opt);
		}
		if (i + 1 >= argc)
			die_usage("option %s needs a value", opt);
		if (*dst)
			die_usage("option %s given twice", opt);
		*dst = argv[++i];
	}

	if (!path)
		die_usage("missing required option %s", "--file");
	if (!sizes_arg)
		die_usage("missing required option %s", "--sizes");
	if (!iters_arg)
		die_usage("missing required option %s", "--iters");
	if (!rounds_arg)
		die_usage("missing required option %s", "--rounds");
	if (path[0] == '\0')
		die_usage("--file must not be empty%s", NULL);
	switch (parse_sizes(sizes_arg, sizes, &nsizes)) {
	case 0:
		break;
	case -2:
		die_usage("--sizes '%s': each size must be between 8 and "
			  "67108864 bytes", sizes_arg);
		break;
	case -3:
		die_usage("--sizes '%s': at most 64 sizes", sizes_arg);
		break;
	default:
		die_usage("--sizes '%s': expected comma-separated positive "
			  "integers, e.g. 64,128,4096", sizes_arg);
	}
	if (parse_u64(iters_arg, strlen(iters_arg), &iters) != 0 ||
	    iters == 0 || iters > MAX_ITERS)
		die_usage("--iters '%s': expected an integer in 1..10000000000",
			  iters_arg);
	if (parse_u64(rounds_arg, strlen(rounds_arg), &rounds) != 0 ||
	    rounds == 0 || rounds > MAX_ROUNDS)
		die_usage("--rounds '%s': expected an integer in 1..100000",
			  rounds_arg);

	const char *verr = pmem_check_version(PMEM_MAJOR_VERSION,
					      PMEM_MINOR_VERSION);
	if (verr) {
		fprintf(stderr, "%s: libpmem version mismatch: %s\n", prog,
			verr);
		return 1;
	}

	size_t mapped_len = 0;
	int is_pmem = 0;
	char *base = pmem_map_file(path, MAP_LEN, PMEM_FILE_CREATE, 0600,
				   &mapped_len, &is_pmem);
	if (!base) {
		fprintf(stderr, "%s: pmem_map_file(%s): %s\n", prog, path,
			pmem_errormsg());
		return 1;
	}
	if (mapped_len < MAP_LEN) {
		fprintf(stderr,
			"%s: %s mapped only %zu bytes, need %zu (existing file "
			"of another size? remove it)\n",
			prog, path, mapped_len, MAP_LEN);
		pmem_unmap(base, mapped_len);
		return 1;
	}
	const char *force = getenv("PMEM_IS_PMEM_FORCE");
	fprintf(stderr,
		"%s: mapped %s len=%zu is_pmem=%d (PMEM_IS_PMEM_FORCE=%s)\n",
		prog, path, mapped_len, is_pmem, force ? force : "unset");
	if (!is_pmem)
		fprintf(stderr,
			"%s: warning: is_pmem=0; pmem_persist still flushes, "
			"but set PMEM_IS_PMEM_FORCE=1 for the tmpfs setup\n",
			prog);
	report_flush_choice();

	/* prefault every page (tmpfs allocates on first write) */
	memset(base, 0, MAP_LEN);

	for (uint64_t r = 1; r <= rounds; r++) {
		for (size_t k = 0; k < nsizes; k++) {
			size_t size = sizes[k];
			size_t stride = (size + PAGE - 1) / PAGE * PAGE;
			/* offsets 0, stride, ...; last start + size <= MAP_LEN */
			size_t span = MAP_LEN / stride * stride;
			uint64_t st_ns =
				loop_store_only(base, span, stride, size, iters);
			uint64_t p_ns =
				loop_persist(base, span, stride, size, iters);
			if (printf("libpmem %zu %" PRIu64 " %.2f %.2f\n", size,
				   r, (double)p_ns / (double)iters,
				   (double)st_ns / (double)iters) < 0) {
				fprintf(stderr, "%s: write to stdout failed\n",
					prog);
				pmem_unmap(base, mapped_len);
				return 1;
			}
		}
	}
	if (fflush(stdout) != 0) {
		fprintf(stderr, "%s: write to stdout failed\n", prog);
		pmem_unmap(base, mapped_len);
		return 1;
	}
	pmem_unmap(base, mapped_len);
	return 0;
}
