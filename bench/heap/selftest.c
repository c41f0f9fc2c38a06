/*
 * selftest.c: checks that pm.h means the same thing on both backends, and that the maps are
 * correct, before anything is timed. Compiled once per backend, like the benchmarks (run.sh
 * builds hash_map.c with -DHM_LOG=6 here: 64 buckets, so chains are long).
 *
 *   selftest [--dir DIR] [--ops N]
 *
 * Part 1, pm.h semantics (one pool):
 *   commit makes a snapshotted change stick; abort rolls it back and ends the transaction;
 *   a block allocated in an aborted transaction is not linked; a failed call (an impossible
 *   allocation) aborts the transaction, and commit then reports an error and rolls back the
 *   earlier change; nested transactions flatten; zalloc returns zeroed memory; two threads run
 *   transactions at once; committed data survives close + open, aborted data does not.
 * Part 2, maps: for each map, random inserts and removes over a small key space checked against
 *   a reference after every operation's return code, and a full check() + lookup of every key
 *   every 1,000 operations; then ascending inserts and descending removes; close + open in
 *   between.
 *
 * Prints "selftest <backend>: OK" and exits 0, or names the first failure and exits 1.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "maps.h"

__thread struct map_error map_err;

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "[%s] CHECK FAILED %s:%d: %s: ", PM_BACKEND, \
				__FILE__, __LINE__, #cond);                  \
			fprintf(stderr, __VA_ARGS__);                        \
			fprintf(stderr, " (last library message: %s)\n", pm_errormsg()); \
			failures++;                                          \
		}                                                            \
	} while (0)

struct st_root {
	unsigned char bytes[1024];
	pm_oid slot[4];
	uint64_t counter[2][8]; /* one cache line per thread */
	pm_oid maps[3];
};

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

struct th_arg {
	pm_pool *pop;
	pm_oid root;
	int idx;
	int iters;
	int errors;
};

static void *thread_main(void *a_)
{
	struct th_arg *a = a_;
	struct st_root *r = pm_direct(a->pop, a->root);
	for (int i = 0; i < a->iters; i++) {
		if (pm_tx_begin(a->pop) != 0) {
			a->errors++;
			continue;
		}
		uint64_t off = offsetof(struct st_root, counter) + (uint64_t)a->idx * 64;
		if (pm_tx_add_range(a->pop, a->root, off, 8) != 0) {
			a->errors++;
			pm_tx_commit(a->pop);
			continue;
		}
		r->counter[a->idx][0]++;
		if (pm_tx_commit(a->pop) != 0)
			a->errors++;
	}
	return NULL;
}

static void part1(const char *path)
{
	unlink(path);
	pm_pool *pop = pm_pool_create(path, 64ull << 20);
	if (!pop)
		die_pm("pm_pool_create", -1);
	pm_oid root = pm_root(pop, sizeof(struct st_root));
	CHECK(!PM_OID_IS_NULL(root), "pm_root failed");
	struct st_root *r = pm_direct(pop, root);
	CHECK(all_bytes((unsigned char *)r, sizeof(*r), 0), "a new root is not zeroed");
	int err;

	/* commit */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	CHECK(pm_tx_active(pop), "not active after begin");
	CHECK((err = pm_tx_add_range(pop, root, 0, 64)) == 0, "add_range: %d", err);
	memset(r->bytes, 0xaa, 64);
	CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
	CHECK(!pm_tx_active(pop), "still active after commit");
	CHECK(all_bytes(r->bytes, 64, 0xaa), "committed change lost");

	/* abort */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	CHECK((err = pm_tx_add_range(pop, root, 0, 64)) == 0, "add_range: %d", err);
	memset(r->bytes, 0xbb, 64);
	pm_tx_abort(pop, PM_EBENCH);
	CHECK(!pm_tx_active(pop), "still active after abort");
	CHECK(all_bytes(r->bytes, 64, 0xaa), "abort did not roll back");

	/* allocation in an aborted transaction */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	pm_oid b = pm_tx_alloc(pop, 128);
	CHECK(!PM_OID_IS_NULL(b), "alloc failed");
	CHECK((err = pm_tx_add_direct(pop, &r->slot[0], 16)) == 0, "add_direct: %d", err);
	r->slot[0] = b;
	pm_tx_abort(pop, PM_EBENCH);
	CHECK(PM_OID_IS_NULL(r->slot[0]), "aborted link survived");

	/* a failing call aborts; commit reports it and rolls back the earlier change */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	CHECK((err = pm_tx_add_range(pop, root, 64, 64)) == 0, "add_range: %d", err);
	memset(r->bytes + 64, 0xcc, 64);
	pm_oid huge = pm_tx_alloc(pop, (size_t)1 << 40);
	CHECK(PM_OID_IS_NULL(huge), "a 1 TiB allocation succeeded");
	err = pm_tx_commit(pop);
	CHECK(err != 0, "commit after a failed call returned 0");
	CHECK(!pm_tx_active(pop), "still active after failed commit");
	CHECK(all_bytes(r->bytes + 64, 64, 0), "failed transaction not rolled back");

	/* nesting flattens: the inner commit does not end the transaction */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	CHECK((err = pm_tx_begin(pop)) == 0, "nested begin: %d", err);
	CHECK((err = pm_tx_add_range(pop, root, 128, 64)) == 0, "add_range: %d", err);
	memset(r->bytes + 128, 0xdd, 64);
	CHECK((err = pm_tx_commit(pop)) == 0, "inner commit: %d", err);
	CHECK(pm_tx_active(pop), "inner commit ended the outer transaction");
	CHECK((err = pm_tx_commit(pop)) == 0, "outer commit: %d", err);
	CHECK(!pm_tx_active(pop), "active after outer commit");
	CHECK(all_bytes(r->bytes + 128, 64, 0xdd), "nested change lost");

	/* alloc + link + write in one transaction, kept */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	b = pm_tx_alloc(pop, 256);
	CHECK(!PM_OID_IS_NULL(b), "alloc failed");
	if (!PM_OID_IS_NULL(b))
		memset(pm_direct(pop, b), 0xee, 256);
	CHECK((err = pm_tx_add_range(pop, root, offsetof(struct st_root, slot), 16)) == 0, "add: %d",
	      err);
	r->slot[0] = b;
	CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);

	/* zalloc after dirty frees returns zeroes */
	for (int i = 0; i < 64; i++) {
		CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
		pm_oid d = pm_tx_alloc(pop, 4096);
		if (!PM_OID_IS_NULL(d))
			memset(pm_direct(pop, d), 0x77, 4096);
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
		CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
		CHECK((err = pm_tx_free(pop, d)) == 0, "free: %d", err);
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
		CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
		pm_oid z = pm_tx_zalloc(pop, 4096);
		CHECK(!PM_OID_IS_NULL(z) && all_bytes(pm_direct(pop, z), 4096, 0), "zalloc not zeroed");
		CHECK((err = pm_tx_free(pop, z)) == 0, "free: %d", err);
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
	}
	/* freeing the null oid does nothing */
	CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
	CHECK((err = pm_tx_free(pop, PM_OID_NULL)) == 0, "free(null): %d", err);
	CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);

	/* two threads at once */
	struct th_arg ta[2];
	pthread_t th[2];
	for (int t = 0; t < 2; t++) {
		ta[t] = (struct th_arg){.pop = pop, .root = root, .idx = t, .iters = 20000};
		pthread_create(&th[t], NULL, thread_main, &ta[t]);
	}
	for (int t = 0; t < 2; t++) {
		pthread_join(th[t], NULL);
		CHECK(ta[t].errors == 0, "thread %d: %d transaction errors", t, ta[t].errors);
		CHECK(r->counter[t][0] == 20000, "thread %d counter %" PRIu64, t, r->counter[t][0]);
	}

	/* the build's mode (pm.h): pm_write / pm_write_fresh / pm_read, commit, abort, free */
	{
		unsigned char buf[64], got[64];
		memset(buf, 0x5a, sizeof(buf));
		CHECK((err = pm_tx_begin_mode(pop, PM_TX_MODE)) == 0, "begin_mode: %d", err);
		CHECK((err = pm_write(pop, r->bytes + 256, buf, 64)) == 0, "pm_write: %d", err);
		memset(got, 0, sizeof(got));
		CHECK((err = pm_read(pop, got, r->bytes + 256, 64)) == 0, "pm_read: %d", err);
		CHECK(all_bytes(got, 64, 0x5a), "pm_read does not see the transaction's write");
		pm_oid b = pm_tx_alloc(pop, 64);
		CHECK(!PM_OID_IS_NULL(b), "alloc failed");
		if (!PM_OID_IS_NULL(b)) {
			CHECK((err = pm_write_fresh(pop, pm_direct(pop, b), buf, 64)) == 0,
			      "pm_write_fresh: %d", err);
			CHECK((err = pm_write(pop, &r->slot[1], &b, sizeof(b))) == 0, "pm_write: %d",
			      err);
		}
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
		CHECK(all_bytes(r->bytes + 256, 64, 0x5a), "committed pm_write lost");
		CHECK(PM_OID_EQ(r->slot[1], b) && all_bytes(pm_direct(pop, r->slot[1]), 64, 0x5a),
		      "committed fresh block lost");

		memset(buf, 0x33, sizeof(buf));
		CHECK((err = pm_tx_begin_mode(pop, PM_TX_MODE)) == 0, "begin_mode: %d", err);
		CHECK((err = pm_write(pop, r->bytes + 256, buf, 64)) == 0, "pm_write: %d", err);
		CHECK((err = pm_read(pop, got, r->bytes + 256, 64)) == 0 && all_bytes(got, 64, 0x33),
		      "pm_read does not see the transaction's write");
		pm_tx_abort(pop, PM_EBENCH);
		CHECK(!pm_tx_active(pop), "still active after abort");
		CHECK(all_bytes(r->bytes + 256, 64, 0x5a), "abort did not roll back a pm_write");

		pm_oid s, null = PM_OID_NULL;
		CHECK((err = pm_tx_begin_mode(pop, PM_TX_MODE)) == 0, "begin_mode: %d", err);
		CHECK((err = pm_read(pop, &s, &r->slot[1], sizeof(s))) == 0, "pm_read: %d", err);
		CHECK((err = pm_tx_free(pop, s)) == 0, "free: %d", err);
		CHECK((err = pm_write(pop, &r->slot[1], &null, sizeof(null))) == 0, "pm_write: %d",
		      err);
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
		CHECK(PM_OID_IS_NULL(r->slot[1]), "freed slot not null");
	}

	/* close + open */
	CHECK((err = pm_pool_close(pop)) == 0, "close: %d", err);
	pop = pm_pool_open(path);
	if (!pop)
		die_pm("pm_pool_open", -1);
	root = pm_root(pop, sizeof(struct st_root));
	r = pm_direct(pop, root);
	CHECK(r != NULL, "no root after open");
	if (r) {
		CHECK(all_bytes(r->bytes, 64, 0xaa), "bytes 0..63 after reopen");
		CHECK(all_bytes(r->bytes + 64, 64, 0), "bytes 64..127 after reopen");
		CHECK(all_bytes(r->bytes + 128, 64, 0xdd), "bytes 128..191 after reopen");
		CHECK(all_bytes(r->bytes + 256, 64, 0x5a), "bytes 256..319 after reopen");
		CHECK(!PM_OID_IS_NULL(r->slot[0]) && all_bytes(pm_direct(pop, r->slot[0]), 256, 0xee),
		      "allocated block after reopen");
		CHECK(r->counter[0][0] == 20000 && r->counter[1][0] == 20000, "counters after reopen");
		/* free the kept block; it stays freed */
		CHECK((err = pm_tx_begin(pop)) == 0, "begin: %d", err);
		CHECK((err = pm_tx_add_range(pop, root, offsetof(struct st_root, slot), 16)) == 0,
		      "add: %d", err);
		CHECK((err = pm_tx_free(pop, r->slot[0])) == 0, "free: %d", err);
		r->slot[0] = PM_OID_NULL;
		CHECK((err = pm_tx_commit(pop)) == 0, "commit: %d", err);
	}
	CHECK((err = pm_pool_close(pop)) == 0, "close: %d", err);
	unlink(path);
}

/* ---- part 2: maps ---------------------------------------------------------------------------- */

#define KEYSPACE 3000

static void full_check(pm_pool *pop, const struct map_ops *ops, pm_oid map, const uint64_t *keys,
		       const unsigned char *present, uint64_t npresent, const char *when)
{
	uint64_t walked = ops->check(pop, map), counted = ops->count(pop, map);
	CHECK(walked == npresent && counted == npresent,
	      "%s %s: walk %" PRIu64 ", count %" PRIu64 ", expected %" PRIu64, ops->name, when, walked,
	      counted, npresent);
	uint64_t bad = 0;
	for (int i = 0; i < KEYSPACE; i++) {
		uint64_t v = 0;
		int rc = ops->lookup(pop, map, keys[i], &v);
		if (present[i] ? (rc != MAP_OK || v != value_of(keys[i])) : rc != MAP_NOTFOUND)
			bad++;
	}
	CHECK(bad == 0, "%s %s: %" PRIu64 " lookups wrong", ops->name, when, bad);
}

static pm_pool *reopen_pool(pm_pool *pop, const char *path, pm_oid *map, int idx)
{
	int err = pm_pool_close(pop);
	CHECK(err == 0, "close: %d", err);
	pop = pm_pool_open(path);
	if (!pop)
		die_pm("pm_pool_open", -1);
	struct st_root *r = pm_direct(pop, pm_root(pop, sizeof(struct st_root)));
	*map = r->maps[idx];
	return pop;
}

static void part2(const char *path, const struct map_ops *ops, int idx, uint64_t nops)
{
	unlink(path);
	pm_pool *pop = pm_pool_create(path, 256ull << 20);
	if (!pop)
		die_pm("pm_pool_create", -1);
	struct st_root *r = pm_direct(pop, pm_root(pop, sizeof(struct st_root)));
	ops->create(pop, &r->maps[idx]);
	pm_oid map = r->maps[idx];

	static uint64_t keys[KEYSPACE];
	static unsigned char present[KEYSPACE];
	memset(present, 0, sizeof(present));
	for (int i = 0; i < KEYSPACE; i++)
		keys[i] = key_of((uint64_t)i, 99);
	uint64_t npresent = 0;
	rng_t rng;
	rng_seed(&rng, 4242 + (uint64_t)idx);
	int fails_before = failures;

	for (uint64_t op = 0; op < nops && failures == fails_before; op++) {
		int i = (int)rng_below(&rng, KEYSPACE);
		/* drift toward full, then toward empty, then full again */
		int insert_bias = (op / (nops / 4 + 1)) % 2 == 0 ? 60 : 40;
		if ((int)rng_below(&rng, 100) < insert_bias) {
			int rc = ops->insert(pop, map, keys[i], value_of(keys[i]));
			int want = present[i] ? MAP_EXISTS : MAP_OK;
			CHECK(rc == want, "%s op %" PRIu64 ": insert returned %d, expected %d (%s: %s)",
			      ops->name, op, rc, want, rc == MAP_ERR ? map_err.what : "", map_err.msg);
			if (rc == MAP_OK) {
				present[i] = 1;
				npresent++;
			}
		} else {
			int rc = ops->remove(pop, map, keys[i]);
			int want = present[i] ? MAP_OK : MAP_NOTFOUND;
			CHECK(rc == want, "%s op %" PRIu64 ": remove returned %d, expected %d (%s: %s)",
			      ops->name, op, rc, want, rc == MAP_ERR ? map_err.what : "", map_err.msg);
			if (rc == MAP_OK) {
				present[i] = 0;
				npresent--;
			}
		}
		if (op % 1000 == 999)
			full_check(pop, ops, map, keys, present, npresent, "random phase");
		if (op == nops / 2) {
			pop = reopen_pool(pop, path, &map, idx);
			full_check(pop, ops, map, keys, present, npresent, "after reopen");
		}
	}
	full_check(pop, ops, map, keys, present, npresent, "end of random phase");

	/* empty it, then ascending inserts / descending removes of sorted keys */
	for (int i = 0; i < KEYSPACE; i++)
		if (present[i]) {
			CHECK(ops->remove(pop, map, keys[i]) == MAP_OK, "%s: emptying", ops->name);
			present[i] = 0;
		}
	npresent = 0;
	full_check(pop, ops, map, keys, present, 0, "emptied");
	uint64_t sorted[KEYSPACE];
	memcpy(sorted, keys, sizeof(sorted));
	for (int i = 1; i < KEYSPACE; i++) /* insertion sort: small */
		for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
			uint64_t t = sorted[j];
			sorted[j] = sorted[j - 1];
			sorted[j - 1] = t;
		}
	for (int i = 0; i < KEYSPACE; i++)
		CHECK(ops->insert(pop, map, sorted[i], value_of(sorted[i])) == MAP_OK, "%s: ascending",
		      ops->name);
	memset(present, 1, sizeof(present));
	full_check(pop, ops, map, keys, present, KEYSPACE, "after ascending inserts");
	pop = reopen_pool(pop, path, &map, idx);
	full_check(pop, ops, map, keys, present, KEYSPACE, "after ascending inserts + reopen");
	for (int i = KEYSPACE - 1; i >= 0; i--) {
		CHECK(ops->remove(pop, map, sorted[i]) == MAP_OK, "%s: descending", ops->name);
		if (i % 500 == 0) {
			for (int j = 0; j < KEYSPACE; j++)
				present[j] = 0;
			uint64_t cnt = 0;
			for (int j = 0; j < KEYSPACE; j++)
				for (int s = 0; s < i; s++)
					if (sorted[s] == keys[j]) {
						present[j] = 1;
						cnt++;
						break;
					}
			full_check(pop, ops, map, keys, present, cnt, "descending removes");
		}
	}
	memset(present, 0, sizeof(present));
	full_check(pop, ops, map, keys, present, 0, "end");
	int err = pm_pool_close(pop);
	CHECK(err == 0, "close: %d", err);
	unlink(path);
	fprintf(stderr, "[%s] selftest %s: %s\n", PM_BACKEND, ops->name,
		failures == fails_before ? "ok" : "FAILED");
}

int main(int argc, char **argv)
{
	const char *dir = "/dev/shm";
	uint64_t nops = 60000;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--ops"))
			nops = parse_u64(argv[i], argv[i + 1]);
		else
			die("usage: selftest [--dir DIR] [--ops N]");
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/selftest-%s-%d.pool", dir, PM_BACKEND, (int)getpid());
	part1(path);
	fprintf(stderr, "[%s] selftest pm.h semantics: %s\n", PM_BACKEND, failures ? "FAILED" : "ok");
	part2(path, &btree_map_ops, 0, nops);
	part2(path, &rbtree_map_ops, 1, nops);
	part2(path, &hash_map_ops, 2, nops);
	if (failures) {
		printf("selftest %s: FAILED (%d checks)\n", PM_BACKEND, failures);
		return 1;
	}
	printf("selftest %s: OK\n", PM_BACKEND);
	return 0;
}
