/*
 * hash_map.c: a persistent chained hash map with a fixed table of 2^20 buckets (no rehash),
 * each bucket a 16-byte oid heading a singly linked list of 32-byte entries; new entries go at
 * the head of their chain. The bucket table is a parray (256 segments of 4096 buckets, 64 KiB
 * each) so that no allocation exceeds 64 KiB. The bucket is the high 20 bits of mix64(key).
 *
 * Insert: walk the chain (duplicate check), allocate the entry, snapshot the 16-byte bucket,
 * link, snapshot the 8-byte count, count++. Remove: find the entry, snapshot the 16-byte link
 * that points at it (bucket or predecessor's next), unlink, free, snapshot the count, count--.
 */
#include "maps.h"
#include "parray.h"

#ifndef HM_LOG
#define HM_LOG 20 /* selftest builds with a tiny table to get long chains */
#endif
#define HM_BUCKETS (1ull << HM_LOG)

struct hm_entry {
	uint64_t key;
	uint64_t val;
	pm_oid next;
};

struct hm_map {
	pm_oid buckets; /* parray of HM_BUCKETS oids */
	uint64_t count;
	uint64_t nbuckets;
};

static inline uint64_t bucket_of(uint64_t key)
{
	return mix64(key ^ 0x6a09e667f3bcc909ull) >> (64 - HM_LOG);
}

static void hm_create(pm_pool *pop, pm_oid *dest)
{
	pm_oid h = map_create_header(pop, dest, sizeof(struct hm_map));
	struct hm_map *m = pm_direct(pop, h);
	/* The table, one transaction per segment; then the bucket count. */
	parray_create(pop, &m->buckets, HM_BUCKETS);
	int err = pm_tx_begin(pop);
	if (err != 0)
		die_pm("pm_tx_begin", err);
	if ((err = pm_tx_add_range(pop, h, offsetof(struct hm_map, nbuckets), sizeof(uint64_t))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_range(hash header)", err);
	}
	m->nbuckets = HM_BUCKETS;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(hash create)", err);
}

static int insert_body(pm_pool *pop, pm_oid map, struct hm_map *m, uint64_t k, uint64_t v)
{
	const struct parray *d = pm_direct(pop, m->buckets);
	uint64_t b = bucket_of(k);
	pm_oid seg;
	pm_oid *slot = parray_slot(pop, d, b, &seg);
	for (pm_oid e = *slot; !PM_OID_IS_NULL(e);) {
		struct hm_entry *en = pm_direct(pop, e);
		if (en->key == k)
			return MAP_EXISTS;
		e = en->next;
	}
	pm_oid n = pm_tx_alloc(pop, sizeof(struct hm_entry));
	if (PM_OID_IS_NULL(n))
		return map_fail("pm_tx_alloc(hash entry)", -1);
	struct hm_entry *nn = pm_direct(pop, n);
	nn->key = k;
	nn->val = v;
	nn->next = *slot;
	int err = pm_tx_add_range(pop, seg, parray_slot_off(b), sizeof(pm_oid));
	if (err != 0)
		return map_fail("pm_tx_add_range(bucket)", err);
	*slot = n;
	err = pm_tx_add_range(pop, map, offsetof(struct hm_map, count), sizeof(uint64_t));
	if (err != 0)
		return map_fail("pm_tx_add_range(hash count)", err);
	m->count++;
	return MAP_OK;
}

static int remove_body(pm_pool *pop, pm_oid map, struct hm_map *m, uint64_t k)
{
	const struct parray *d = pm_direct(pop, m->buckets);
	uint64_t b = bucket_of(k);
	pm_oid seg;
	pm_oid *slot = parray_slot(pop, d, b, &seg);
	pm_oid prev = PM_OID_NULL, e = *slot;
	struct hm_entry *en = NULL;
	while (!PM_OID_IS_NULL(e)) {
		en = pm_direct(pop, e);
		if (en->key == k)
			break;
		prev = e;
		e = en->next;
	}
	if (PM_OID_IS_NULL(e))
		return MAP_NOTFOUND;
	int err;
	if (PM_OID_IS_NULL(prev)) {
		if ((err = pm_tx_add_range(pop, seg, parray_slot_off(b), sizeof(pm_oid))) != 0)
			return map_fail("pm_tx_add_range(bucket)", err);
		*slot = en->next;
	} else {
		if ((err = pm_tx_add_range(pop, prev, offsetof(struct hm_entry, next), sizeof(pm_oid))) != 0)
			return map_fail("pm_tx_add_range(entry link)", err);
		((struct hm_entry *)pm_direct(pop, prev))->next = en->next;
	}
	if ((err = pm_tx_free(pop, e)) != 0)
		return map_fail("pm_tx_free(hash entry)", err);
	err = pm_tx_add_range(pop, map, offsetof(struct hm_map, count), sizeof(uint64_t));
	if (err != 0)
		return map_fail("pm_tx_add_range(hash count)", err);
	m->count--;
	return MAP_OK;
}

static int hm_insert(pm_pool *pop, pm_oid map, uint64_t key, uint64_t value)
{
	struct hm_map *m = pm_direct(pop, map);
	MAP_TX(pop, insert_body(pop, map, m, key, value));
}

static int hm_remove(pm_pool *pop, pm_oid map, uint64_t key)
{
	struct hm_map *m = pm_direct(pop, map);
	MAP_TX(pop, remove_body(pop, map, m, key));
}

static int hm_lookup(pm_pool *pop, pm_oid map, uint64_t key, uint64_t *value)
{
	struct hm_map *m = pm_direct(pop, map);
	const struct parray *d = pm_direct(pop, m->buckets);
	pm_oid e = *parray_slot(pop, d, bucket_of(key), NULL);
	while (!PM_OID_IS_NULL(e)) {
		struct hm_entry *en = pm_direct(pop, e);
		if (en->key == key) {
			*value = en->val;
			return MAP_OK;
		}
		e = en->next;
	}
	return MAP_NOTFOUND;
}

static uint64_t hm_check(pm_pool *pop, pm_oid map)
{
	struct hm_map *m = pm_direct(pop, map);
	if (m->nbuckets != HM_BUCKETS)
		die("hash: header says %" PRIu64 " buckets", m->nbuckets);
	const struct parray *d = pm_direct(pop, m->buckets);
	if (d == NULL || d->nslots != HM_BUCKETS)
		die("hash: bucket table missing or of the wrong size");
	uint64_t n = 0, limit = m->count + 1;
	for (uint64_t b = 0; b < HM_BUCKETS; b++) {
		pm_oid e = *parray_slot(pop, d, b, NULL);
		uint64_t chain = 0;
		while (!PM_OID_IS_NULL(e)) {
			struct hm_entry *en = pm_direct(pop, e);
			if (en == NULL)
				die("hash: entry oid off=%" PRIu64 " does not translate", e.off);
			if (bucket_of(en->key) != b)
				die("hash: key %#" PRIx64 " found in bucket %" PRIu64, en->key, b);
			if (++chain > limit)
				die("hash: chain of bucket %" PRIu64 " longer than the count (cycle?)", b);
			n++;
			e = en->next;
		}
	}
	return n;
}

static uint64_t hm_count(pm_pool *pop, pm_oid map)
{
	return ((struct hm_map *)pm_direct(pop, map))->count;
}

const struct map_ops hash_map_ops = {
	.name = "hash",
	.create = hm_create,
	.insert = hm_insert,
	.remove = hm_remove,
	.lookup = hm_lookup,
	.check = hm_check,
	.count = hm_count,
};
