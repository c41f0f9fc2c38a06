/*
 * fof.h: the one interface the flush-on-fail benchmark's data structures are written against,
 * compiled once per configuration (exactly one of the FOF_* macros below, chosen by run.sh):
 *
 *   FOF_VOLATILE      plain DRAM: malloc / free, plain loads and stores, no transactions, no
 *                     logging, no flushes (the paper's FoF / WSP configuration; also built as a
 *                     static binary so that a whole-process persistence wrapper can run it)
 *   FOF_PMEMOBJ       libpmemobj 1.12 through ../heap/pm.h: undo transactions, flush on commit
 *   FOF_KAVACH_UNDO   Kavach's heap through ../heap/pm.h (kavach.h): undo transactions, flush
 *                     on commit
 *   FOF_KAVACH_REDO   Kavach's heap, redo transactions (kv_tx_begin_mode KV_TX_REDO,
 *                     kv_tx_write, kv_tx_read). With KAVACH_ON_DEMAND_MS=W in the environment
 *                     (pm.h's pm_kavach_mode) the pool runs with durability on demand
 *                     (kv_pool_on_demand): commits store in place with no flush and no fence,
 *                     and a save on a power-failure warning writes the dirty lines back. That
 *                     is the "kavach-fof" configuration. Without it, redo commits flush at
 *                     commit ("kavach-redo", flush on commit with a redo log).
 *
 * Persistent references are 8-byte offsets from the heap's base (0 = null), computed once
 * after open from the root object (base = pm_direct(root) - root.off, which holds for both
 * libraries' linear mappings); in the volatile build a reference is the pointer itself. The
 * structures follow references with one addition, on every configuration.
 *
 * Inside a transaction the code stores only with FOF_ST (one 8-byte field of an object it
 * names), initialises a block it allocated in the same transaction with FOF_FRESH, and loads
 * fields with FOF_LD:
 *   undo (pmemobj, kavach-undo): FOF_ST snapshots the whole object once per transaction
 *       (pm_tx_add_direct; a small per-transaction set remembers what was snapshotted or
 *       allocated), then stores; FOF_LD is a plain load; FOF_FRESH a memcpy (both libraries
 *       make blocks allocated in the transaction durable at commit).
 *   redo (kavach-fof, kavach-redo): FOF_ST is kv_tx_write of the field and remembers the
 *       object as written; FOF_LD of an object written in this transaction is kv_tx_read (the
 *       redo rules: a direct load sees the committed bytes), of any other object a plain load
 *       (its committed bytes are what the transaction sees); FOF_FRESH is one kv_tx_write.
 *   volatile: plain stores and loads.
 * Every library failure ends the process with a message (exit 1): no benchmark operation is
 * expected to fail.
 */
#ifndef FOF_H
#define FOF_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if (defined(FOF_VOLATILE) + defined(FOF_PMEMOBJ) + defined(FOF_KAVACH_UNDO) + \
     defined(FOF_KAVACH_REDO)) != 1
#error "define exactly one of FOF_VOLATILE, FOF_PMEMOBJ, FOF_KAVACH_UNDO, FOF_KAVACH_REDO"
#endif

#if defined(FOF_PMEMOBJ)
#define KV_BACKEND_PMEMOBJ
#elif defined(FOF_KAVACH_UNDO)
#define KV_BACKEND_KAVACH
#elif defined(FOF_KAVACH_REDO)
#define KV_BACKEND_KAVACH
#define KV_KAVACH_REDO
#endif

#if !defined(FOF_VOLATILE)
#include "../heap/pm.h"
#define FOF_PERSISTENT 1
#else
#define FOF_PERSISTENT 0
#endif

#if defined(FOF_VOLATILE)
#define FOF_BUILD "volatile"
#elif defined(FOF_PMEMOBJ)
#define FOF_BUILD "pmemobj"
#elif defined(FOF_KAVACH_UNDO)
#define FOF_BUILD "kavach-undo"
#else
#define FOF_BUILD "kavach-redo"
#endif

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "[fof %s] FATAL: ", FOF_BUILD);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	exit(1);
}

#if FOF_PERSISTENT
#define die_lib(what, err) \
	die("%s failed (%s:%d): error %d: %s", (what), __FILE__, __LINE__, (int)(err), pm_errormsg())
#endif

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A bijection on 64-bit integers (the splitmix64 finaliser): distinct inputs, distinct keys. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

typedef struct {
	uint64_t s;
} rng_t;

static inline void rng_seed(rng_t *r, uint64_t seed)
{
	r->s = mix64(seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull) | 1;
}

/* xorshift64* */
static inline uint64_t rng_next(rng_t *r)
{
	uint64_t x = r->s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static inline uint64_t rng_below(rng_t *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

static inline uint64_t value_of(uint64_t key)
{
	return key ^ 0x5a5a5a5a5a5a5a5aull;
}

/* ---- the heap: base, references, transactions --------------------------------------------- */

typedef uint64_t ref_t;

struct fof_heap {
#if FOF_PERSISTENT
	pm_pool *pop;
	char *base;
	pm_oid root;
#endif
	void *hdr; /* the root object: the structure's header */
	uint64_t tx_count;
	uint64_t tx_not_redo; /* redo build: transactions the library ran in another mode */
};

static struct fof_heap H;

static inline void *P(ref_t r)
{
#if FOF_PERSISTENT
	return r ? (void *)(H.base + r) : NULL;
#else
	return (void *)(uintptr_t)r;
#endif
}

static inline ref_t R(const void *p)
{
#if FOF_PERSISTENT
	return p ? (ref_t)((const char *)p - H.base) : 0;
#else
	return (ref_t)(uintptr_t)p;
#endif
}

/* The per-transaction set of objects snapshotted (undo), written (redo) or allocated. */
#define FOF_SET_MAX 256
static struct {
	int n;
	void *obj[FOF_SET_MAX];
} S;

static inline int set_has(const void *o)
{
	for (int i = 0; i < S.n; i++)
		if (S.obj[i] == o)
			return 1;
	return 0;
}

static inline void set_add(void *o)
{
	if (S.n >= FOF_SET_MAX)
		die("a transaction touched more than %d objects", FOF_SET_MAX);
	S.obj[S.n++] = o;
}

#define HDR_SIZE 64

#if FOF_PERSISTENT
static void heap_attach(void)
{
	H.root = pm_root(H.pop, HDR_SIZE);
	if (PM_OID_IS_NULL(H.root))
		die_lib("pm_root", -1);
	H.hdr = pm_direct(H.pop, H.root);
	if (!H.hdr)
		die_lib("pm_direct(root)", -1);
	H.base = (char *)H.hdr - H.root.off;
}
#endif

/* Create the heap (a fresh pool file at `path`, or nothing for volatile) with a zeroed header. */
static void heap_create(const char *path, uint64_t pool_bytes)
{
#if FOF_PERSISTENT
	H.pop = pm_pool_create(path, pool_bytes);
	if (!H.pop)
		die("pool create %s (%" PRIu64 " bytes): %s", path, pool_bytes, pm_errormsg());
	heap_attach();
#else
	(void)path;
	(void)pool_bytes;
	H.hdr = calloc(1, HDR_SIZE);
	if (!H.hdr)
		die("calloc(header)");
#endif
}

#if FOF_PERSISTENT
/* Close and open the pool again (the structure must read back the same). */
static void heap_reopen(const char *path)
{
	int err = pm_pool_close(H.pop);
	if (err != 0)
		die_lib("pm_pool_close", err);
	H.pop = pm_pool_open(path);
	if (!H.pop)
		die("pool open %s: %s", path, pm_errormsg());
	heap_attach();
}

static void heap_close(void)
{
	int err = pm_pool_close(H.pop);
	if (err != 0)
		die_lib("pm_pool_close", err);
}
#endif

/* 1 if durability on demand is on (kavach redo build), 0 if commits flush, -1: not Kavach. */
static int heap_on_demand(void)
{
#if defined(FOF_KAVACH_REDO) || defined(FOF_KAVACH_UNDO)
	return kv_pool_durability(H.pop);
#else
	return -1;
#endif
}

static inline void tx_begin(void)
{
	S.n = 0;
#if FOF_PERSISTENT
	int err = pm_tx_begin_mode(H.pop, PM_TX_MODE);
	if (err != 0)
		die_lib("pm_tx_begin_mode", err);
#if defined(FOF_KAVACH_REDO)
	/* Admission may run a refused thread's redo transactions as undo ones: count them. */
	if ((H.tx_count & 1023) == 0 && kv_tx_mode(H.pop) != KV_TX_REDO)
		H.tx_not_redo++;
#endif
	H.tx_count++;
#endif
}

static inline void tx_commit(void)
{
#if FOF_PERSISTENT
	int err = pm_tx_commit(H.pop);
	if (err != 0)
		die_lib("pm_tx_commit", err);
#endif
}

/* Allocate `size` bytes in the transaction (contents undefined until FOF_FRESH). */
static inline void *tx_alloc(size_t size)
{
#if FOF_PERSISTENT
	pm_oid o = pm_tx_alloc(H.pop, size);
	if (PM_OID_IS_NULL(o))
		die_lib("pm_tx_alloc", -1);
	void *p = H.base + o.off;
#else
	void *p = malloc(size);
	if (!p)
		die("malloc(%zu)", size);
#endif
	return p;
}

/* Free the block at `p` (at commit on the persistent heaps). */
static inline void tx_free(void *p)
{
#if FOF_PERSISTENT
	pm_oid o = H.root;
	o.off = (uint64_t)((char *)p - H.base);
	int err = pm_tx_free(H.pop, o);
	if (err != 0)
		die_lib("pm_tx_free", err);
#else
	free(p);
#endif
}

/* Initialise a block allocated in this transaction with `len` bytes from `src`. */
static inline void tx_fresh(void *p, const void *src, size_t len)
{
#if defined(FOF_KAVACH_REDO)
	int err = kv_tx_write(H.pop, p, src, len);
	if (err != 0)
		die_lib("kv_tx_write(fresh)", err);
	set_add(p);
#elif FOF_PERSISTENT
	memcpy(p, src, len);
	set_add(p); /* allocated in this transaction: never snapshotted */
#else
	memcpy(p, src, len);
#endif
}

/* Store the 8-byte `val` at `field`, inside object `obj` of `objlen` bytes. */
static inline void tx_st(void *obj, size_t objlen, uint64_t *field, uint64_t val)
{
#if defined(FOF_KAVACH_REDO)
	(void)objlen;
	int err = kv_tx_write(H.pop, field, &val, sizeof(val));
	if (err != 0)
		die_lib("kv_tx_write", err);
	if (!set_has(obj))
		set_add(obj);
#elif FOF_PERSISTENT
	if (!set_has(obj)) {
		int err = pm_tx_add_direct(H.pop, obj, objlen);
		if (err != 0)
			die_lib("pm_tx_add_direct", err);
		set_add(obj);
	}
	*field = val;
#else
	(void)obj;
	(void)objlen;
	*field = val;
#endif
}

/* Load the 8-byte `field` of object `obj` as the transaction sees it. */
static inline uint64_t tx_ld(const void *obj, const uint64_t *field)
{
#if defined(FOF_KAVACH_REDO)
	if (S.n && set_has(obj)) {
		uint64_t v;
		int err = kv_tx_read(H.pop, &v, field, sizeof(v));
		if (err != 0)
			die_lib("kv_tx_read", err);
		return v;
	}
#endif
	(void)obj;
	return *field;
}

#define FOF_ST(obj, field, val) tx_st((obj), sizeof(*(obj)), &(obj)->field, (uint64_t)(val))
#define FOF_LD(obj, field) tx_ld((obj), &(obj)->field)

#endif /* FOF_H */
