/*
 * maps.h: persistent maps (uint64 key -> uint64 value) written once against pm.h.
 *
 * Every insert and remove is one transaction of its own. Each node or header is snapshotted
 * once per transaction, before its first change (a small per-transaction set remembers what was
 * snapshotted or allocated in this transaction; blocks allocated in the transaction are not
 * snapshotted: both libraries make them durable at commit).
 *
 * A map is created into a 16-byte oid field inside the pool (a root slot). Map functions are
 * not thread-safe for one map; different maps may be used by different threads at once.
 */
#ifndef KV_BENCH_MAPS_H
#define KV_BENCH_MAPS_H

#include "pm.h"
#include "util.h"

enum {
	MAP_OK = 0,
	MAP_EXISTS = 1,   /* insert: the key is already present (nothing changed) */
	MAP_NOTFOUND = 2, /* remove / lookup: no such key */
	MAP_ERR = 3,      /* a library call failed; see map_last_error() */
};

struct map_ops {
	const char *name;
	/* Create an empty map, storing its oid in *dest (inside the pool). Dies on failure. */
	void (*create)(pm_pool *pop, pm_oid *dest);
	int (*insert)(pm_pool *pop, pm_oid map, uint64_t key, uint64_t value);
	int (*remove)(pm_pool *pop, pm_oid map, uint64_t key);
	int (*lookup)(pm_pool *pop, pm_oid map, uint64_t key, uint64_t *value);
	/* Walk the whole map checking its structural invariants (dies, naming the violation);
	 * returns the number of entries found by the walk. */
	uint64_t (*check)(pm_pool *pop, pm_oid map);
	/* The entry count kept in the map's header. */
	uint64_t (*count)(pm_pool *pop, pm_oid map);
};

extern const struct map_ops btree_map_ops;
extern const struct map_ops rbtree_map_ops;
extern const struct map_ops hash_map_ops;

/* What failed last in this thread (for MAP_ERR). */
struct map_error {
	const char *what;
	int err;
	char msg[256];
};
extern __thread struct map_error map_err;

static inline int map_fail(const char *what, int err)
{
	map_err.what = what;
	map_err.err = err;
	snprintf(map_err.msg, sizeof(map_err.msg), "%s", pm_errormsg());
	return MAP_ERR;
}

/* ---- the per-transaction snapshot set ------------------------------------------------------ */

#define SNAP_MAX 128

struct snapset {
	int n;
	uint64_t off[SNAP_MAX];
};

static inline int snap_has(const struct snapset *s, pm_oid o)
{
	for (int i = 0; i < s->n; i++)
		if (s->off[i] == o.off)
			return 1;
	return 0;
}

static inline void snap_note(struct snapset *s, pm_oid o)
{
	if (s->n < SNAP_MAX)
		s->off[s->n++] = o.off;
}

/* Snapshot [o, o + len) unless done already in this transaction. 0 or MAP_ERR. */
static inline int snap_obj(pm_pool *pop, struct snapset *s, pm_oid o, size_t len)
{
	if (snap_has(s, o))
		return 0;
	int err = pm_tx_add_range(pop, o, 0, len);
	if (err != 0)
		return map_fail("pm_tx_add_range", err);
	snap_note(s, o);
	return 0;
}

#define TRY(expr)                          \
	do {                               \
		int try_r_ = (expr);       \
		if (try_r_ != MAP_OK)      \
			return try_r_;     \
	} while (0)

/*
 * Run `body` (returning MAP_OK, MAP_EXISTS, MAP_NOTFOUND or MAP_ERR) as one transaction.
 * A body that returns MAP_ERR left the transaction aborted; pm_tx_commit then ends it.
 */
#define MAP_TX(pop, body_call)                                     \
	do {                                                       \
		int tx_e_ = pm_tx_begin(pop);                      \
		if (tx_e_ != 0)                                    \
			return map_fail("pm_tx_begin", tx_e_);     \
		int tx_r_ = (body_call);                           \
		if (tx_r_ == MAP_ERR) {                            \
			struct map_error keep_ = map_err;          \
			(void)pm_tx_commit(pop);                   \
			map_err = keep_;                           \
			return MAP_ERR;                            \
		}                                                  \
		tx_e_ = pm_tx_commit(pop);                         \
		if (tx_e_ != 0)                                    \
			return map_fail("pm_tx_commit", tx_e_);    \
		return tx_r_;                                      \
	} while (0)

/* Create a zeroed header object of `size` bytes and store its oid in *dest (one transaction). */
static inline pm_oid map_create_header(pm_pool *pop, pm_oid *dest, size_t size)
{
	int err = pm_tx_begin(pop);
	if (err != 0)
		die_pm("pm_tx_begin", err);
	pm_oid h = pm_tx_zalloc(pop, size);
	if (PM_OID_IS_NULL(h)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_zalloc(map header)", err);
	}
	if ((err = pm_tx_add_direct(pop, dest, sizeof(*dest))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_direct(map slot)", err);
	}
	*dest = h;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(map header)", err);
	return h;
}

#endif /* KV_BENCH_MAPS_H */
