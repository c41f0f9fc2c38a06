/*
 * txbench.c: transaction latency microbenchmarks, compiled once per backend (see pm.h).
 *
 *   txbench --op overwrite|allocfree|pair|words --size S [--n N] [--warmup W] [--dir DIR]
 *           [--pool-mib M] [--seed X]
 *
 * Each run creates a fresh pool DIR/txbench-<backend>-<pid>.pool, measures one group on one
 * size, verifies, closes and deletes the pool. Single thread. Times are the whole loop of N
 * operations (clock_gettime(CLOCK_MONOTONIC) before and after) divided by N, after W untimed
 * warm-up operations of the same kind.
 *
 * Every timed transaction is begun in the build's mode (pm_tx_begin_mode(pop, PM_TX_MODE):
 * redo for kavach-redo, undo otherwise) and stores with pm_write (add_range + memcpy on the undo
 * builds, kv_tx_write on kavach-redo); see pm.h.
 *
 *   overwrite   per op: begin; pm_write(the whole S-byte object, from a buffer memset with a
 *               new byte); commit. One object, allocated before the warm-up.
 *   allocfree   "alloc" per op: begin; alloc(S); add_range(16-byte slot i); slot i = block;
 *               commit. Then "free" per op, slots in a random order: begin; add_range(slot);
 *               free(block); slot = null; commit. The warm-up allocates and frees W blocks
 *               first. Checked: every block is distinct, translates, has a usable size >= S and
 *               does not overlap another; every slot is null at the end. Then "realloc":
 *               the same N alloc transactions again (timed) into the heap whose blocks were
 *               all freed, so that the memory was touched before (no first-touch page faults
 *               if the allocator reuses it); then they are freed, untimed.
 *   pair        per op: the alloc transaction into slot 0, then the free transaction of it
 *               (two transactions; the time reported is per pair).
 *   words       the transaction-size sweep, S = words per transaction (1..64): per op: begin;
 *               S pm_writes of one 8-byte word each, in S different cache lines of one 4 KiB
 *               object (word j at byte 64 j); commit. Checked: every word holds the last value.
 *
 * Output: one JSON line per measured operation on stdout.
 */
#include "parray.h"

struct tx_root {
	pm_oid obj;   /* overwrite: the object */
	pm_oid slots; /* allocfree / pair: parray of block slots */
};

static pm_pool *pop;

static void report(const char *op, uint64_t size, uint64_t n, uint64_t warmup, uint64_t ns)
{
	double per = (double)ns / (double)n;
	printf("{\"bench\":\"tx\",\"backend\":\"%s\",\"op\":\"%s\",\"size\":%" PRIu64 ",\"n\":%" PRIu64
	       ",\"warmup\":%" PRIu64 ",\"total_s\":%.6f,\"ns_per_op\":%.1f,\"ops_per_s\":%.1f}\n",
	       PM_BACKEND, op, size, n, warmup, (double)ns / 1e9, per, 1e9 / per);
	fflush(stdout);
	fprintf(stderr, "[%s] %-9s %5" PRIu64 " B: %8.1f ns/op %10.0f ops/s (n=%" PRIu64 ")\n",
		PM_BACKEND, op, size, per, 1e9 / per, n);
}

/* ---- overwrite ----------------------------------------------------------------------------- */

static void bench_overwrite(struct tx_root *r, uint64_t size, uint64_t n, uint64_t warmup)
{
	int err;
	if ((err = pm_tx_begin(pop)) != 0)
		die_pm("pm_tx_begin", err);
	pm_oid o = pm_tx_zalloc(pop, size);
	if (PM_OID_IS_NULL(o)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_zalloc(object)", err);
	}
	if ((err = pm_tx_add_direct(pop, &r->obj, sizeof(r->obj))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_direct(root)", err);
	}
	r->obj = o;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit", err);

	unsigned char *buf = malloc(size);
	if (!buf)
		die("out of memory");
	uint64_t t0 = 0, total = warmup + n;
	for (uint64_t i = 0; i < total; i++) {
		if (i == warmup)
			t0 = now_ns();
		memset(buf, (int)(i & 0xff), size);
		if ((err = pm_tx_begin_mode(pop, PM_TX_MODE)) != 0)
			die_pm("pm_tx_begin_mode", err);
		if ((err = pm_write(pop, pm_direct(pop, r->obj), buf, size)) != 0) {
			pm_tx_commit(pop);
			die_pm("pm_write(object)", err);
		}
		if ((err = pm_tx_commit(pop)) != 0)
			die_pm("pm_tx_commit", err);
	}
	uint64_t t1 = now_ns();
	free(buf);
	/* The object holds the last pattern. */
	const unsigned char *p = pm_direct(pop, r->obj);
	unsigned char want = (unsigned char)((total - 1) & 0xff);
	for (uint64_t j = 0; j < size; j++)
		if (p[j] != want)
			die("overwrite: byte %" PRIu64 " is %#x, expected %#x", j, p[j], want);
	report("overwrite", size, n, warmup, t1 - t0);
}

/* ---- alloc / free -------------------------------------------------------------------------- */

static inline void tx_alloc_into(const struct parray *d, uint64_t i, uint64_t size)
{
	int err;
	pm_oid *slot = parray_slot(pop, d, i, NULL);
	if ((err = pm_tx_begin_mode(pop, PM_TX_MODE)) != 0)
		die_pm("pm_tx_begin_mode", err);
	pm_oid b = pm_tx_alloc(pop, size);
	if (PM_OID_IS_NULL(b)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_alloc", err);
	}
	if ((err = pm_write(pop, slot, &b, sizeof(b))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_write(slot)", err);
	}
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(alloc)", err);
}

static inline void tx_free_from(const struct parray *d, uint64_t i)
{
	int err;
	pm_oid *slot = parray_slot(pop, d, i, NULL);
	pm_oid b, null = PM_OID_NULL;
	if ((err = pm_tx_begin_mode(pop, PM_TX_MODE)) != 0)
		die_pm("pm_tx_begin_mode", err);
	if ((err = pm_read(pop, &b, slot, sizeof(b))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_read(slot)", err);
	}
	if ((err = pm_write(pop, slot, &null, sizeof(null))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_write(slot)", err);
	}
	if ((err = pm_tx_free(pop, b)) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_free", err);
	}
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(free)", err);
}

static size_t usable_size(pm_oid o)
{
#if defined(KV_BACKEND_PMEMOBJ)
	return pmemobj_alloc_usable_size(o);
#else
	return kv_usable_size(pop, o);
#endif
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void check_blocks(const struct parray *d, uint64_t n, uint64_t size)
{
	uint64_t *offs = malloc(n * sizeof(uint64_t));
	if (!offs)
		die("out of memory");
	for (uint64_t i = 0; i < n; i++) {
		pm_oid b = *parray_slot(pop, d, i, NULL);
		if (PM_OID_IS_NULL(b))
			die("alloc: slot %" PRIu64 " is null after its transaction committed", i);
		if (pm_direct(pop, b) == NULL)
			die("alloc: block of slot %" PRIu64 " (off %" PRIu64 ") does not translate", i, b.off);
		size_t us = usable_size(b);
		if (us < size)
			die("alloc: block of slot %" PRIu64 " has usable size %zu < %" PRIu64, i, us, size);
		offs[i] = b.off;
	}
	qsort(offs, n, sizeof(uint64_t), cmp_u64);
	for (uint64_t i = 1; i < n; i++)
		if (offs[i] < offs[i - 1] + size)
			die("alloc: blocks at offsets %" PRIu64 " and %" PRIu64 " overlap (size %" PRIu64 ")",
			    offs[i - 1], offs[i], size);
	free(offs);
}

static void check_all_null(const struct parray *d, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (!PM_OID_IS_NULL(*parray_slot(pop, d, i, NULL)))
			die("free: slot %" PRIu64 " is not null after its transaction committed", i);
}

static void bench_allocfree(struct tx_root *r, uint64_t size, uint64_t n, uint64_t warmup,
			    uint64_t seed)
{
	uint64_t nslots = n > warmup ? n : warmup;
	parray_create(pop, &r->slots, nslots);
	const struct parray *d = pm_direct(pop, r->slots);

	for (uint64_t i = 0; i < warmup; i++)
		tx_alloc_into(d, i, size);
	for (uint64_t i = 0; i < warmup; i++)
		tx_free_from(d, i);

	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++)
		tx_alloc_into(d, i, size);
	uint64_t t1 = now_ns();
	check_blocks(d, n, size);

	uint64_t *order = malloc(n * sizeof(uint64_t));
	if (!order)
		die("out of memory");
	for (uint64_t i = 0; i < n; i++)
		order[i] = i;
	rng_t rng;
	rng_seed(&rng, seed);
	shuffle_u64(order, n, &rng);

	uint64_t t2 = now_ns();
	for (uint64_t j = 0; j < n; j++)
		tx_free_from(d, order[j]);
	uint64_t t3 = now_ns();
	check_all_null(d, n);

	/* The same N allocations again, into a heap whose blocks were all used and freed. */
	uint64_t t4 = now_ns();
	for (uint64_t i = 0; i < n; i++)
		tx_alloc_into(d, i, size);
	uint64_t t5 = now_ns();
	check_blocks(d, n, size);
	for (uint64_t j = 0; j < n; j++)
		tx_free_from(d, order[j]);
	check_all_null(d, n);
	free(order);

	report("alloc", size, n, warmup, t1 - t0);
	report("free", size, n, warmup, t3 - t2);
	report("realloc", size, n, warmup, t5 - t4);
}

static void bench_pair(struct tx_root *r, uint64_t size, uint64_t n, uint64_t warmup)
{
	parray_create(pop, &r->slots, 1);
	const struct parray *d = pm_direct(pop, r->slots);
	uint64_t t0 = 0, total = warmup + n;
	for (uint64_t i = 0; i < total; i++) {
		if (i == warmup)
			t0 = now_ns();
		tx_alloc_into(d, 0, size);
		tx_free_from(d, 0);
	}
	uint64_t t1 = now_ns();
	check_all_null(d, 1);
	report("pair", size, n, warmup, t1 - t0);
}

/* ---- words: the transaction-size sweep ---------------------------------------------------- */

#define WORDS_MAX 64

static void bench_words(struct tx_root *r, uint64_t words, uint64_t n, uint64_t warmup)
{
	int err;
	if (words > WORDS_MAX)
		die("--op words: --size is the number of words per transaction, 1..%d", WORDS_MAX);
	if ((err = pm_tx_begin(pop)) != 0)
		die_pm("pm_tx_begin", err);
	pm_oid o = pm_tx_zalloc(pop, WORDS_MAX * 64);
	if (PM_OID_IS_NULL(o)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_zalloc(object)", err);
	}
	if ((err = pm_tx_add_direct(pop, &r->obj, sizeof(r->obj))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_direct(root)", err);
	}
	r->obj = o;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit", err);
	unsigned char *base = pm_direct(pop, o);

	uint64_t t0 = 0, total = warmup + n;
	for (uint64_t i = 0; i < total; i++) {
		if (i == warmup)
			t0 = now_ns();
		if ((err = pm_tx_begin_mode(pop, PM_TX_MODE)) != 0)
			die_pm("pm_tx_begin_mode", err);
		for (uint64_t j = 0; j < words; j++) {
			uint64_t v = i * WORDS_MAX + j;
			if ((err = pm_write(pop, base + 64 * j, &v, sizeof(v))) != 0) {
				pm_tx_commit(pop);
				die_pm("pm_write(word)", err);
			}
		}
		if ((err = pm_tx_commit(pop)) != 0)
			die_pm("pm_tx_commit", err);
	}
	uint64_t t1 = now_ns();
	for (uint64_t j = 0; j < WORDS_MAX; j++) {
		uint64_t v, want = j < words ? (total - 1) * WORDS_MAX + j : 0;
		memcpy(&v, base + 64 * j, sizeof(v));
		if (v != want)
			die("words: word %" PRIu64 " is %" PRIu64 ", expected %" PRIu64, j, v, want);
	}
	report("words", words, n, warmup, t1 - t0);
}

static void usage(void)
{
	fprintf(stderr, "usage: txbench --op overwrite|allocfree|pair|words --size S [--n N] [--warmup W]\n"
			"               [--dir DIR] [--pool-mib M] [--seed X]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *op = NULL, *dir = "/dev/shm";
	uint64_t size = 0, n = 0, warmup = UINT64_MAX, pool_mib = 0, seed = 1;
	if (argc % 2 == 0)
		usage();
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		if (!strcmp(a, "--op"))
			op = v;
		else if (!strcmp(a, "--size"))
			size = parse_u64(a, v);
		else if (!strcmp(a, "--n"))
			n = parse_u64(a, v);
		else if (!strcmp(a, "--warmup"))
			warmup = parse_u64(a, v);
		else if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--pool-mib"))
			pool_mib = parse_u64(a, v);
		else if (!strcmp(a, "--seed"))
			seed = parse_u64(a, v);
		else
			usage();
	}
	if (op == NULL || size == 0)
		usage();
	int is_ow = !strcmp(op, "overwrite"), is_af = !strcmp(op, "allocfree"),
	    is_pair = !strcmp(op, "pair"), is_words = !strcmp(op, "words");
	if (!is_ow && !is_af && !is_pair && !is_words)
		usage();
	if (n == 0)
		n = is_ow || is_words ? 200000 : 100000;
	if (warmup == UINT64_MAX)
		warmup = n / 10;
	if (pool_mib == 0) {
		pool_mib = 256;
		if (is_af) {
			uint64_t live = n > warmup ? n : warmup;
			/* twice the payload plus per-block overhead, plus 256 MiB */
			uint64_t need = 256 + (live * (2 * size + 256)) / (1 << 20);
			if (need > pool_mib)
				pool_mib = need;
		}
	}

	char path[4096];
	snprintf(path, sizeof(path), "%s/txbench-%s-%d.pool", dir, PM_BACKEND, (int)getpid());
	unlink(path);
	pop = pm_pool_create(path, pool_mib << 20);
	if (pop == NULL)
		die_pm("pm_pool_create", -1);
	pm_oid root = pm_root(pop, sizeof(struct tx_root));
	if (PM_OID_IS_NULL(root))
		die_pm("pm_root", -1);
	struct tx_root *r = pm_direct(pop, root);

	if (is_ow)
		bench_overwrite(r, size, n, warmup);
	else if (is_af)
		bench_allocfree(r, size, n, warmup, seed);
	else if (is_words)
		bench_words(r, size, n, warmup);
	else
		bench_pair(r, size, n, warmup);

	int err = pm_pool_close(pop);
	if (err != 0)
		die_pm("pm_pool_close", err);
	unlink(path);
	return 0;
}
