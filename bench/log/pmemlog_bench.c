/*
 * libpmemlog side of the log benchmark (bench/log/run.sh runs it against
 * crates/bench/src/bin/log_bench.rs). Same options, same phases, same output
 * lines, using only libpmemlog's public API for the log itself:
 *
 *   lat    single-thread pmemlog_append latency per payload size, timed in
 *          batches of --batch appends (one clock read per batch); before a
 *          batch that might not fit, pmemlog_rewind outside the timed region.
 *   floor  on a plain pmem_map_file mapping: a 64 B pmem_persist, and per
 *          latency size libpmemlog's own persistence sequence for an append
 *          without the lock (memcpy_nodrain, drain, store the 8-byte write
 *          offset, pmem_persist it).
 *   tput   appends/s with T threads calling pmemlog_append on one pool (the
 *          library serializes appends with a rwlock). Segments that fit the
 *          pool; between segments (writers parked on a barrier, clock
 *          stopped) pmemlog_rewind.
 *   vuln   nothing: every pmemlog_append is durable when it returns.
 *   recov  fill a fresh pool of --recov-mib MiB with SIZE-byte appends until
 *          it is full, close it, then time pmemlog_open and pmemlog_walk with
 *          chunksize SIZE; the callback copies each record out (as Kavach's
 *          iterator hands out an owned copy). libpmemlog keeps no record
 *          boundaries and no checksums: the walk only cuts the byte stream.
 *
 * Output: `KIND pmemlog FIELDS...` per result (see bench/log/summarize.py),
 * or JSON objects with --json. --modes/--vuln-modes are accepted for a
 * matching command line and ignored. Run with PMEM_IS_PMEM_FORCE=1 on tmpfs.
 * Pool files live in --dir and are removed on exit (also on SIGINT, SIGTERM
 * and SIGHUP).
 *
 * Exit codes: 0 ok, 2 bad arguments, 1 runtime failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <libpmem.h>
#include <libpmemlog.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SIDE "pmemlog"
#define WARMUP_APPENDS 1000ULL
#define MAX_LIST 32
#define MAX_FILES 16

enum { PH_LAT, PH_FLOOR, PH_TPUT, PH_VULN, PH_RECOV };
static const char *const PHASE_NAMES[] = {"lat", "floor", "tput", "vuln", "recov"};

struct list {
	size_t n;
	unsigned long long v[MAX_LIST];
};

static struct {
	const char *dir;
	struct list phases, sizes, threads, tput_sizes, recov_sizes;
	unsigned long long iters, iter_bytes, batch, pool_mib, tput_ops;
	unsigned long long recov_mib, recov_reps, round;
	int quick, json;
} A;

/* ---- temporary files, removed on exit ---------------------------------- */
static char files[MAX_FILES][4096];
static volatile sig_atomic_t nfiles;

static void remove_files(void)
{
	for (int i = 0; i < nfiles; i++)
		if (files[i][0])
			unlink(files[i]);
}

static void on_signal(int sig)
{
	remove_files();
	signal(sig, SIG_DFL);
	raise(sig);
}

static const char *temp_path(const char *what)
{
	if (nfiles >= MAX_FILES) {
		fprintf(stderr, "pmemlog_bench: too many files\n");
		exit(1);
	}
	char *p = files[nfiles];
	snprintf(p, sizeof(files[0]), "%s/kavach-logbench-pmemlog-%d-%s", A.dir,
		 (int)getpid(), what);
	unlink(p);
	nfiles++;
	return p;
}

static void forget_path(const char *p)
{
	unlink(p);
	for (int i = 0; i < nfiles; i++)
		if (files[i] == p)
			files[i][0] = '\0';
}

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "pmemlog_bench: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

/* ---- output ------------------------------------------------------------ */
struct line {
	char buf[2048];
	size_t n;
};

static void put(struct line *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(l->buf + l->n, sizeof(l->buf) - l->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		l->n += (size_t)k;
	if (l->n >= sizeof(l->buf))
		l->n = sizeof(l->buf) - 1;
}

static void line_start(struct line *l, const char *kind)
{
	l->n = 0;
	if (A.json)
		put(l, "{\"kind\":\"%s\",\"side\":\"%s\"", kind, SIDE);
	else
		put(l, "%s %s", kind, SIDE);
}

static void line_u(struct line *l, const char *name, unsigned long long v)
{
	if (A.json)
		put(l, ",\"%s\":%llu", name, v);
	else
		put(l, " %llu", v);
}

static void line_f(struct line *l, const char *name, double v)
{
	if (A.json)
		put(l, ",\"%s\":%.3f", name, v);
	else
		put(l, " %.3f", v);
}

static void line_s(struct line *l, const char *name, const char *v)
{
	if (A.json)
		put(l, ",\"%s\":\"%s\"", name, v);
	else
		put(l, " %s", v);
}

static void line_end(struct line *l)
{
	if (A.json)
		put(l, "}");
	printf("%s\n", l->buf);
	fflush(stdout);
}

/* ---- helpers ----------------------------------------------------------- */
static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted values. */
static double pct(const double *v, size_t n, double p)
{
	if (n == 0)
		return 0.0;
	size_t rank = (size_t)(p * (double)n);
	if ((double)rank < p * (double)n)
		rank++;
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

static unsigned char *payload(size_t size)
{
	unsigned char *p = malloc(size ? size : 1);
	if (!p)
		die("out of memory");
	for (size_t i = 0; i < size; i++)
		p[i] = (unsigned char)((unsigned char)(i * 31) ^ 0x5a);
	return p;
}

static PMEMlogpool *create_pool(const char *path, unsigned long long bytes)
{
	PMEMlogpool *plp = pmemlog_create(path, (size_t)bytes, 0600);
	if (!plp)
		die("pmemlog_create %s: %s", path, pmemlog_errormsg());
	return plp;
}

static size_t room(PMEMlogpool *plp)
{
	return pmemlog_nbyte(plp) - (size_t)pmemlog_tell(plp);
}

static void append(PMEMlogpool *plp, const void *buf, size_t n)
{
	if (pmemlog_append(plp, buf, n) != 0)
		die("pmemlog_append(%zu): %s", n, pmemlog_errormsg());
}

/* Touch every page of the log once (64 KiB appends until full), then rewind. */
static void prefault(PMEMlogpool *plp)
{
	size_t n = 64 << 10;
	unsigned char *chunk = payload(n);
	while (room(plp) >= n)
		append(plp, chunk, n);
	pmemlog_rewind(plp);
	free(chunk);
}

/* ---- lat --------------------------------------------------------------- */
static void phase_lat(void)
{
	const char *path = temp_path("lat");
	PMEMlogpool *plp = create_pool(path, A.pool_mib << 20);
	fprintf(stderr, "pmemlog_bench: pool %s, %zu usable bytes, PMEM_IS_PMEM_FORCE=%s\n",
		path, pmemlog_nbyte(plp),
		getenv("PMEM_IS_PMEM_FORCE") ? getenv("PMEM_IS_PMEM_FORCE") : "(unset)");
	prefault(plp);
	for (size_t si = 0; si < A.sizes.n; si++) {
		size_t size = (size_t)A.sizes.v[si];
		unsigned char *data = payload(size);
		unsigned long long ops = A.iters;
		if (A.iter_bytes / size < ops)
			ops = A.iter_bytes / size;
		if (ops < A.batch)
			ops = A.batch;
		ops = (ops + A.batch - 1) / A.batch * A.batch;
		unsigned long long batches = ops / A.batch;
		unsigned long long warm = ops < WARMUP_APPENDS ? ops : WARMUP_APPENDS;
		if (room(plp) < (warm + 1) * size)
			pmemlog_rewind(plp);
		for (unsigned long long i = 0; i < warm; i++)
			append(plp, data, size);
		double *per_op = malloc(batches * sizeof(double));
		if (!per_op)
			die("out of memory");
		uint64_t total = 0;
		for (unsigned long long b = 0; b < batches; b++) {
			if (room(plp) < (A.batch + 1) * size)
				pmemlog_rewind(plp);
			uint64_t t0 = now_ns();
			for (unsigned long long i = 0; i < A.batch; i++)
				if (pmemlog_append(plp, data, size) != 0)
					die("pmemlog_append: %s", pmemlog_errormsg());
			uint64_t ns = now_ns() - t0;
			total += ns;
			per_op[b] = (double)ns / (double)A.batch;
		}
		qsort(per_op, batches, sizeof(double), cmp_double);
		struct line l;
		line_start(&l, "lat");
		line_u(&l, "size", size);
		line_u(&l, "round", A.round);
		line_u(&l, "ops", ops);
		line_u(&l, "batch", A.batch);
		line_f(&l, "median_ns", pct(per_op, batches, 0.5));
		line_f(&l, "p99_ns", pct(per_op, batches, 0.99));
		line_f(&l, "mean_ns", (double)total / (double)ops);
		line_end(&l);
		free(per_op);
		free(data);
	}
	pmemlog_close(plp);
	forget_path(path);
}

/* ---- floor ------------------------------------------------------------- */
/* Store + 64 B pmem_persist (what=0), or libpmemlog's own sequence for a
 * `size`-byte append without the lock and checks (what=1): pmem_memcpy_nodrain
 * of the data, pmem_drain, store the 8-byte write offset, pmem_persist it.
 * Data from 4 KiB on; the "write offset" word lives at offset 8, as
 * libpmemlog's sits in its pool header; records are packed back to back. */
static void floor_walk(int what, size_t size, char *base, size_t len, unsigned long long iters,
		       const unsigned char *src)
{
	size_t stride = what == 0 ? 128 : size;
	size_t off = 4096;
	volatile uint64_t *hdr = (volatile uint64_t *)(base + 8);
	for (unsigned long long i = 0; i < iters; i++) {
		char *p = base + off;
		if (what == 0) {
			*(volatile uint64_t *)p = i;
			pmem_persist(p, 64);
		} else {
			pmem_memcpy_nodrain(p, src, size);
			pmem_drain();
			*hdr = off + size;
			pmem_persist((void *)hdr, 8);
		}
		off += stride;
		if (off + stride > len)
			off = 4096;
	}
}

static void floor_one(const char *name, int what, size_t size, char *base, size_t len,
		      unsigned long long iters)
{
	unsigned char *src = payload(size);
	floor_walk(what, size, base, len, iters < WARMUP_APPENDS ? iters : WARMUP_APPENDS, src);
	uint64_t t0 = now_ns();
	floor_walk(what, size, base, len, iters, src);
	double ns = (double)(now_ns() - t0) / (double)iters;
	free(src);
	struct line l;
	line_start(&l, "floor");
	line_s(&l, "what", name);
	line_u(&l, "round", A.round);
	line_u(&l, "iters", iters);
	line_f(&l, "ns", ns);
	line_end(&l);
}

static void phase_floor(void)
{
	const char *path = temp_path("floor");
	size_t len = (size_t)(A.pool_mib << 20), mapped = 0;
	int is_pmem = 0;
	char *base = pmem_map_file(path, len, PMEM_FILE_CREATE | PMEM_FILE_EXCL, 0600,
				   &mapped, &is_pmem);
	if (!base)
		die("pmem_map_file %s: %s", path, pmem_errormsg());
	if (!is_pmem)
		die("%s is not pmem: set PMEM_IS_PMEM_FORCE=1", path);
	memset(base, 0, mapped); /* prefault */
	floor_one("persist64", 0, 64, base, mapped, A.iters);
	for (size_t si = 0; si < A.sizes.n; si++) {
		size_t size = (size_t)A.sizes.v[si];
		unsigned long long iters = A.iters;
		if (A.iter_bytes / size < iters)
			iters = A.iter_bytes / size;
		if (iters < 1)
			iters = 1;
		char name[64];
		snprintf(name, sizeof(name), "pmemlog_seq%zu", size);
		floor_one(name, 1, size, base, mapped, iters);
	}
	pmem_unmap(base, mapped);
	forget_path(path);
}

/* ---- tput -------------------------------------------------------------- */
struct tput_ctx {
	PMEMlogpool *plp;
	const unsigned char *data;
	size_t size;
	unsigned long long per_thread, seg, segments;
	pthread_barrier_t barrier;
	volatile int failed;
};

static void *writer(void *arg)
{
	struct tput_ctx *c = arg;
	unsigned long long left = c->per_thread;
	for (unsigned long long s = 0; s < c->segments; s++) {
		pthread_barrier_wait(&c->barrier);
		unsigned long long n = left < c->seg ? left : c->seg;
		left -= n;
		for (unsigned long long i = 0; i < n && !c->failed; i++)
			if (pmemlog_append(c->plp, c->data, c->size) != 0)
				c->failed = errno ? errno : 1;
		pthread_barrier_wait(&c->barrier);
	}
	return NULL;
}

/* `total` appends by `threads` writers; returns the timed seconds, sets *ops. */
static double run_appends(PMEMlogpool *plp, const unsigned char *data, size_t size,
			  unsigned threads, unsigned long long total, unsigned long long *ops)
{
	struct tput_ctx c;
	memset(&c, 0, sizeof(c));
	c.plp = plp;
	c.data = data;
	c.size = size;
	c.per_thread = total / threads ? total / threads : 1;
	unsigned long long seg = pmemlog_nbyte(plp) * 9 / 10 / size / threads;
	if (seg < 1)
		seg = 1;
	if (seg > c.per_thread)
		seg = c.per_thread;
	c.seg = seg;
	c.segments = (c.per_thread + seg - 1) / seg;
	if (pthread_barrier_init(&c.barrier, NULL, threads + 1) != 0)
		die("pthread_barrier_init failed");
	pthread_t tids[256];
	for (unsigned t = 0; t < threads; t++)
		if (pthread_create(&tids[t], NULL, writer, &c) != 0)
			die("pthread_create failed");
	uint64_t elapsed = 0;
	for (unsigned long long s = 0; s < c.segments; s++) {
		pmemlog_rewind(plp);
		pthread_barrier_wait(&c.barrier);
		uint64_t t0 = now_ns();
		pthread_barrier_wait(&c.barrier);
		elapsed += now_ns() - t0;
	}
	for (unsigned t = 0; t < threads; t++)
		pthread_join(tids[t], NULL);
	pthread_barrier_destroy(&c.barrier);
	if (c.failed)
		die("pmemlog_append failed in a writer: %s", strerror(c.failed));
	pmemlog_rewind(plp);
	*ops = c.per_thread * threads;
	return (double)elapsed / 1e9;
}

static void phase_tput(void)
{
	const char *path = temp_path("tput");
	PMEMlogpool *plp = create_pool(path, A.pool_mib << 20);
	prefault(plp);
	for (size_t si = 0; si < A.tput_sizes.n; si++) {
		size_t size = (size_t)A.tput_sizes.v[si];
		unsigned char *data = payload(size);
		for (size_t ti = 0; ti < A.threads.n; ti++) {
			unsigned t = (unsigned)A.threads.v[ti];
			unsigned long long ops = 0;
			run_appends(plp, data, size, t, WARMUP_APPENDS * t, &ops);
			double secs = run_appends(plp, data, size, t, A.tput_ops, &ops);
			struct line l;
			line_start(&l, "tput");
			line_s(&l, "mode", "append");
			line_u(&l, "size", size);
			line_u(&l, "threads", t);
			line_u(&l, "round", A.round);
			line_u(&l, "ops", ops);
			line_f(&l, "seconds", secs);
			line_f(&l, "ops_per_s", (double)ops / secs);
			line_end(&l);
		}
		free(data);
	}
	pmemlog_close(plp);
	forget_path(path);
}

/* ---- recov ------------------------------------------------------------- */
struct walk_ctx {
	unsigned char *buf;
	unsigned long long n, bytes;
};

static int take_record(const void *buf, size_t len, void *arg)
{
	struct walk_ctx *w = arg;
	memcpy(w->buf, buf, len);
	__asm__ volatile("" : : "r"(w->buf) : "memory");
	w->n++;
	w->bytes += len;
	return 1;
}

static void phase_recov(void)
{
	for (size_t si = 0; si < A.recov_sizes.n; si++) {
		size_t size = (size_t)A.recov_sizes.v[si];
		char what[64];
		snprintf(what, sizeof(what), "recov%zu", size);
		const char *path = temp_path(what);
		unsigned char *data = payload(size);
		PMEMlogpool *plp = create_pool(path, A.recov_mib << 20);
		unsigned long long filled = 0;
		while (room(plp) >= size) {
			append(plp, data, size);
			filled++;
		}
		pmemlog_close(plp);
		struct walk_ctx w = {payload(size), 0, 0};
		for (unsigned long long rep = 1; rep <= A.recov_reps; rep++) {
			w.n = w.bytes = 0;
			uint64_t t0 = now_ns();
			plp = pmemlog_open(path);
			if (!plp)
				die("pmemlog_open %s: %s", path, pmemlog_errormsg());
			uint64_t t1 = now_ns();
			pmemlog_walk(plp, size, take_record, &w);
			uint64_t t2 = now_ns();
			if (w.n != filled)
				die("walk found %llu records, %llu were appended", w.n, filled);
			pmemlog_close(plp);
			struct line l;
			line_start(&l, "recov");
			line_u(&l, "size", size);
			line_u(&l, "round", A.round);
			line_u(&l, "rep", rep);
			line_u(&l, "records", w.n);
			line_u(&l, "bytes", w.bytes);
			line_f(&l, "open_ms", (double)(t1 - t0) / 1e6);
			line_f(&l, "walk_ms", (double)(t2 - t1) / 1e6);
			line_end(&l);
		}
		free(w.buf);
		free(data);
		forget_path(path);
	}
}

/* ---- arguments --------------------------------------------------------- */
static const char USAGE[] =
	"usage: pmemlog_bench [--dir DIR] [--phases lat,floor,tput,vuln,recov]\n"
	"  [--sizes LIST] [--iters N] [--iter-bytes N] [--batch N] [--pool-mib N]\n"
	"  [--threads LIST] [--tput-sizes LIST] [--tput-ops N] [--modes LIST]\n"
	"  [--vuln-modes LIST] [--vuln-threads LIST] [--vuln-sizes LIST]\n"
	"  [--recov-sizes LIST] [--recov-mib N] [--recov-reps N] [--round N]\n"
	"  [--quick] [--json]\n"
	"Same options as log_bench (Kavach); --modes and --vuln-* are accepted and\n"
	"ignored (every pmemlog_append is durable when it returns).\n";

static void bad(const char *fmt, const char *v)
{
	fprintf(stderr, "pmemlog_bench: ");
	fprintf(stderr, fmt, v);
	fprintf(stderr, "\n%s", USAGE);
	exit(2);
}

static unsigned long long number(const char *name, const char *v)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || *end || end == v || n == 0 || v[0] == '-')
		bad("%s must be a positive integer", name);
	return n;
}

static void parse_list(struct list *l, const char *name, const char *v)
{
	char *copy = strdup(v), *save = NULL;
	if (!copy)
		die("out of memory");
	l->n = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (l->n == MAX_LIST)
			bad("%s: too many values", name);
		l->v[l->n++] = number(name, tok);
	}
	if (l->n == 0)
		bad("%s needs at least one value", name);
	free(copy);
}

static void parse_phases(const char *v)
{
	char *copy = strdup(v), *save = NULL;
	if (!copy)
		die("out of memory");
	A.phases.n = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long long p = 99;
		for (unsigned k = 0; k < 5; k++)
			if (strcmp(tok, PHASE_NAMES[k]) == 0)
				p = k;
		if (p == 99)
			bad("unknown phase `%s`", tok);
		if (A.phases.n == MAX_LIST)
			bad("%s: too many phases", "--phases");
		A.phases.v[A.phases.n++] = p;
	}
	free(copy);
}

static void parse_args(int argc, char **argv)
{
	enum {
		O_DIR = 1000, O_PHASES, O_SIZES, O_ITERS, O_ITER_BYTES, O_BATCH, O_POOL_MIB,
		O_THREADS, O_TPUT_SIZES, O_MODES, O_TPUT_OPS, O_VMODES, O_VTHREADS, O_VSIZES,
		O_RSIZES, O_RMIB, O_RREPS, O_ROUND, O_QUICK, O_JSON, O_HELP
	};
	static const struct option opts[] = {
		{"dir", required_argument, 0, O_DIR},
		{"phases", required_argument, 0, O_PHASES},
		{"sizes", required_argument, 0, O_SIZES},
		{"iters", required_argument, 0, O_ITERS},
		{"iter-bytes", required_argument, 0, O_ITER_BYTES},
		{"batch", required_argument, 0, O_BATCH},
		{"pool-mib", required_argument, 0, O_POOL_MIB},
		{"threads", required_argument, 0, O_THREADS},
		{"tput-sizes", required_argument, 0, O_TPUT_SIZES},
		{"modes", required_argument, 0, O_MODES},
		{"tput-ops", required_argument, 0, O_TPUT_OPS},
		{"vuln-modes", required_argument, 0, O_VMODES},
		{"vuln-threads", required_argument, 0, O_VTHREADS},
		{"vuln-sizes", required_argument, 0, O_VSIZES},
		{"recov-sizes", required_argument, 0, O_RSIZES},
		{"recov-mib", required_argument, 0, O_RMIB},
		{"recov-reps", required_argument, 0, O_RREPS},
		{"round", required_argument, 0, O_ROUND},
		{"quick", no_argument, 0, O_QUICK},
		{"json", no_argument, 0, O_JSON},
		{"help", no_argument, 0, O_HELP},
		{0, 0, 0, 0},
	};
	unsigned long long iters = 0, tput_ops = 0, recov_mib = 0, recov_reps = 0;
	A.dir = "/dev/shm";
	parse_phases("lat,floor,tput,vuln,recov");
	parse_list(&A.sizes, "--sizes", "64,256,1024,4096,65536");
	parse_list(&A.threads, "--threads", "1,2,4");
	parse_list(&A.tput_sizes, "--tput-sizes", "64,1024");
	parse_list(&A.recov_sizes, "--recov-sizes", "1024,64");
	A.iter_bytes = 2ULL << 30;
	A.batch = 64;
	A.pool_mib = 64;
	A.round = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case O_DIR: A.dir = optarg; break;
		case O_PHASES: parse_phases(optarg); break;
		case O_SIZES: parse_list(&A.sizes, "--sizes", optarg); break;
		case O_ITERS: iters = number("--iters", optarg); break;
		case O_ITER_BYTES: A.iter_bytes = number("--iter-bytes", optarg); break;
		case O_BATCH: A.batch = number("--batch", optarg); break;
		case O_POOL_MIB: A.pool_mib = number("--pool-mib", optarg); break;
		case O_THREADS: parse_list(&A.threads, "--threads", optarg); break;
		case O_TPUT_SIZES: parse_list(&A.tput_sizes, "--tput-sizes", optarg); break;
		case O_TPUT_OPS: tput_ops = number("--tput-ops", optarg); break;
		case O_MODES: case O_VMODES: case O_VTHREADS: case O_VSIZES: break;
		case O_RSIZES: parse_list(&A.recov_sizes, "--recov-sizes", optarg); break;
		case O_RMIB: recov_mib = number("--recov-mib", optarg); break;
		case O_RREPS: recov_reps = number("--recov-reps", optarg); break;
		case O_ROUND: A.round = number("--round", optarg); break;
		case O_QUICK: A.quick = 1; break;
		case O_JSON: A.json = 1; break;
		case 'h': case O_HELP: printf("%s", USAGE); exit(0);
		default: fprintf(stderr, "%s", USAGE); exit(2);
		}
	}
	if (optind < argc)
		bad("unexpected argument `%s`", argv[optind]);
	A.iters = iters ? iters : (A.quick ? 20000 : 200000);
	A.tput_ops = tput_ops ? tput_ops : (A.quick ? 50000 : 400000);
	A.recov_mib = recov_mib ? recov_mib : (A.quick ? 32 : 256);
	A.recov_reps = recov_reps ? recov_reps : (A.quick ? 1 : 3);
	if (A.pool_mib < 4 || A.recov_mib < 4)
		bad("%s", "pools need at least 4 MiB");
	for (size_t i = 0; i < A.threads.n; i++)
		if (A.threads.v[i] > 256)
			bad("%s", "thread counts must be in [1, 256]");
	struct list *all[] = {&A.sizes, &A.tput_sizes, &A.recov_sizes};
	for (int k = 0; k < 3; k++)
		for (size_t i = 0; i < all[k]->n; i++)
			if (all[k]->v[i] > (A.pool_mib << 20) / 8 ||
			    all[k]->v[i] > (A.recov_mib << 20) / 8)
				bad("%s", "payload sizes must be in [1, pool/8]");
	struct stat st;
	if (stat(A.dir, &st) != 0 || !S_ISDIR(st.st_mode))
		bad("--dir %s is not a directory", A.dir);
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	atexit(remove_files);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);
	for (size_t i = 0; i < A.phases.n; i++) {
		switch (A.phases.v[i]) {
		case PH_LAT: phase_lat(); break;
		case PH_FLOOR: phase_floor(); break;
		case PH_TPUT: phase_tput(); break;
		case PH_VULN: break; /* every append is durable: no window */
		case PH_RECOV: phase_recov(); break;
		}
	}
	return 0;
}
