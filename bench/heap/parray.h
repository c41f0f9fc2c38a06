/*
 * parray.h: a persistent array of oid slots, in segments of 4096 slots (64 KiB) under one
 * directory object, so that no single allocation is larger than 64 KiB whatever the number of
 * slots (txbench's block slots, the hash map's buckets). Up to 4096 segments (16 M slots).
 *
 * A slot is changed in a transaction with pm_tx_add_range(segment oid, slot offset, 16).
 */
#ifndef KV_BENCH_PARRAY_H
#define KV_BENCH_PARRAY_H

#include "pm.h"
#include "util.h"

#define PA_SEG_SHIFT 12
#define PA_SEG_SLOTS (1ull << PA_SEG_SHIFT)
#define PA_MAX_SEGS 4096ull

struct parray {
	uint64_t nslots;
	uint64_t nseg;
	pm_oid seg[]; /* nseg segments of PA_SEG_SLOTS oids each */
};

/*
 * Create an array of `nslots` null slots and store its oid in *dest (a 16-byte field inside the
 * pool, e.g. in the root): one transaction for the directory, then one per segment (so no
 * transaction allocates more than 64 KiB). Dies on failure.
 */
static void parray_create(pm_pool *pop, pm_oid *dest, uint64_t nslots)
{
	uint64_t nseg = (nslots + PA_SEG_SLOTS - 1) >> PA_SEG_SHIFT;
	if (nseg == 0)
		nseg = 1;
	if (nseg > PA_MAX_SEGS)
		die("parray: %" PRIu64 " slots is more than %llu", nslots, PA_MAX_SEGS * PA_SEG_SLOTS);
	int err;
	if ((err = pm_tx_begin(pop)) != 0)
		die_pm("pm_tx_begin", err);
	pm_oid dir = pm_tx_zalloc(pop, sizeof(struct parray) + nseg * sizeof(pm_oid));
	if (PM_OID_IS_NULL(dir)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_zalloc(parray directory)", err);
	}
	struct parray *d = pm_direct(pop, dir);
	d->nslots = nslots;
	d->nseg = nseg;
	if ((err = pm_tx_add_direct(pop, dest, sizeof(*dest))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_direct(parray destination)", err);
	}
	*dest = dir;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(parray directory)", err);

	for (uint64_t i = 0; i < nseg; i++) {
		if ((err = pm_tx_begin(pop)) != 0)
			die_pm("pm_tx_begin", err);
		pm_oid seg = pm_tx_zalloc(pop, PA_SEG_SLOTS * sizeof(pm_oid));
		if (PM_OID_IS_NULL(seg)) {
			err = pm_tx_commit(pop);
			die_pm("pm_tx_zalloc(parray segment)", err);
		}
		if ((err = pm_tx_add_range(pop, dir, offsetof(struct parray, seg) + i * sizeof(pm_oid),
					   sizeof(pm_oid))) != 0) {
			pm_tx_commit(pop);
			die_pm("pm_tx_add_range(parray directory entry)", err);
		}
		d->seg[i] = seg;
		if ((err = pm_tx_commit(pop)) != 0)
			die_pm("pm_tx_commit(parray segment)", err);
	}
}

/* Address of slot i; *seg_out (if not NULL) gets the oid of its segment for add_range. */
static inline pm_oid *parray_slot(pm_pool *pop, const struct parray *d, uint64_t i, pm_oid *seg_out)
{
	pm_oid seg = d->seg[i >> PA_SEG_SHIFT];
	if (seg_out)
		*seg_out = seg;
	pm_oid *base = pm_direct(pop, seg);
	return base + (i & (PA_SEG_SLOTS - 1));
}

/* Offset of slot i inside its segment (for pm_tx_add_range). */
static inline uint64_t parray_slot_off(uint64_t i)
{
	return (i & (PA_SEG_SLOTS - 1)) * sizeof(pm_oid);
}

#endif /* KV_BENCH_PARRAY_H */
