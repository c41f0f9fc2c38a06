/*
 * mapbench.c: persistent map benchmark, compiled once per backend (see pm.h).
 *
 *   mapbench --map btree|rbtree|hash [--threads T] [--keys K] [--seed S] [--dir DIR]
 *            [--pool-mib M] [--reopen]
 *
 * A fresh pool DIR/mapbench-<backend>-<pid>.pool; T maps (one per thread, each in its own root
 * slot); K distinct random 8-byte keys split evenly between the threads. Phase "insert": every
 * thread inserts its keys into its own map, one transaction per insert, all threads at once.
 * Then every map is verified (a walk checking the structure counts exactly the thread's keys,
 * the header count agrees, every key is found with its value, keys never inserted are absent).
 * Phase "remove": every thread removes its keys in a new random order, one transaction each;
 * then every map must walk empty with a header count of 0 and no key found. --reopen closes and
 * reopens the pool after each phase's verification and verifies again (untimed).
 *
 * Output: one JSON line per phase on stdout; progress and failures on stderr. Exit 1 on any
 * failure (library error or wrong map contents).
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "maps.h"

__thread struct map_error map_err;

#define MAX_THREADS 8

struct mb_root {
	pm_oid map[MAX_THREADS];
};

struct worker {
	pthread_t tid;
	int idx;
	pm_pool *pop;
	pm_oid map;
	const struct map_ops *ops;
	uint64_t *keys;
	uint64_t nkeys;
	int phase; /* 0 insert, 1 remove */
	pthread_barrier_t *barrier;
	uint64_t t_start, t_end;
	int failed;
	uint64_t failed_at;
	int failed_rc;
	struct map_error err;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	pthread_barrier_wait(w->barrier);
	w->t_start = now_ns();
	for (uint64_t i = 0; i < w->nkeys; i++) {
		uint64_t k = w->keys[i];
		int rc = w->phase == 0 ? w->ops->insert(w->pop, w->map, k, value_of(k))
				       : w->ops->remove(w->pop, w->map, k);
		if (rc != MAP_OK) {
			w->failed = 1;
			w->failed_at = i;
			w->failed_rc = rc;
			w->err = map_err;
			break;
		}
	}
	w->t_end = now_ns();
	return NULL;
}

static const char *rc_name(int rc)
{
	switch (rc) {
	case MAP_OK: return "ok";
	case MAP_EXISTS: return "exists";
	case MAP_NOTFOUND: return "not found";
	case MAP_ERR: return "library error";
	}
	return "?";
}

static void run_phase(struct worker *ws, int nthreads, int phase, const char *mapname,
		      uint64_t total_keys)
{
	pthread_barrier_t barrier;
	pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + 1);
	for (int t = 0; t < nthreads; t++) {
		ws[t].phase = phase;
		ws[t].barrier = &barrier;
		ws[t].failed = 0;
		if (pthread_create(&ws[t].tid, NULL, worker_main, &ws[t]) != 0)
			die("pthread_create failed");
	}
	pthread_barrier_wait(&barrier);
	for (int t = 0; t < nthreads; t++)
		pthread_join(ws[t].tid, NULL);
	pthread_barrier_destroy(&barrier);
	/* Wall time from the workers' own clocks: the first start to the last end (this thread
	 * may not get a CPU back from the barrier until a worker is done). */
	uint64_t t0 = UINT64_MAX, t1 = 0;
	for (int t = 0; t < nthreads; t++) {
		if (ws[t].t_start < t0)
			t0 = ws[t].t_start;
		if (ws[t].t_end > t1)
			t1 = ws[t].t_end;
	}

	for (int t = 0; t < nthreads; t++)
		if (ws[t].failed)
			die("%s %s: thread %d, op %" PRIu64 " (key %#" PRIx64 "): %s%s%s (error %d: %s)",
			    mapname, phase ? "remove" : "insert", t, ws[t].failed_at,
			    ws[t].keys[ws[t].failed_at], rc_name(ws[t].failed_rc),
			    ws[t].failed_rc == MAP_ERR ? " in " : "",
			    ws[t].failed_rc == MAP_ERR ? ws[t].err.what : "", ws[t].err.err,
			    ws[t].failed_rc == MAP_ERR ? ws[t].err.msg : "-");

	double wall = (double)(t1 - t0) / 1e9;
	double thread_ns = 0;
	for (int t = 0; t < nthreads; t++)
		thread_ns += (double)(ws[t].t_end - ws[t].t_start) / (double)ws[t].nkeys;
	thread_ns /= nthreads;
	printf("{\"bench\":\"map\",\"backend\":\"%s\",\"map\":\"%s\",\"op\":\"%s\",\"threads\":%d,"
	       "\"keys\":%" PRIu64 ",\"total_s\":%.6f,\"ops_per_s\":%.1f,\"ns_per_op\":%.1f,"
	       "\"thread_ns_per_op\":%.1f}\n",
	       PM_BACKEND, mapname, phase ? "remove" : "insert", nthreads, total_keys, wall,
	       (double)total_keys / wall, wall * 1e9 / (double)total_keys, thread_ns);
	fflush(stdout);
	fprintf(stderr, "[%s] %s %s T=%d: %.3f s, %.0f ops/s, %.0f ns/op per thread\n", PM_BACKEND,
		mapname, phase ? "remove" : "insert", nthreads, wall, (double)total_keys / wall,
		thread_ns);
}

/* Verify every map after a phase: inserted (phase 0) or emptied (phase 1). */
static void verify(pm_pool *pop, struct worker *ws, int nthreads, int phase, uint64_t seed,
		   uint64_t total_keys)
{
	const struct map_ops *ops = ws[0].ops;
	for (int t = 0; t < nthreads; t++) {
		pm_oid map = ws[t].map;
		uint64_t expect = phase == 0 ? ws[t].nkeys : 0;
		uint64_t walked = ops->check(pop, map);
		uint64_t counted = ops->count(pop, map);
		if (walked != expect || counted != expect)
			die("%s verify after %s: map %d walks %" PRIu64 " entries, header count %" PRIu64
			    ", expected %" PRIu64,
			    ops->name, phase ? "remove" : "insert", t, walked, counted, expect);
		uint64_t missing = 0, wrong = 0, present = 0;
		for (uint64_t i = 0; i < ws[t].nkeys; i++) {
			uint64_t k = ws[t].keys[i], v = 0;
			int rc = ops->lookup(pop, map, k, &v);
			if (phase == 0) {
				if (rc != MAP_OK)
					missing++;
				else if (v != value_of(k))
					wrong++;
			} else if (rc != MAP_NOTFOUND) {
				present++;
			}
		}
		/* Keys never inserted (indices past K) must be absent. */
		uint64_t phantom = 0;
		for (uint64_t j = 0; j < 1000; j++) {
			uint64_t v;
			if (ops->lookup(pop, map, key_of(total_keys + j, seed), &v) != MAP_NOTFOUND)
				phantom++;
		}
		if (missing || wrong || present || phantom)
			die("%s verify after %s: map %d: %" PRIu64 " keys missing, %" PRIu64
			    " with a wrong value, %" PRIu64 " still present, %" PRIu64 " never-inserted found",
			    ops->name, phase ? "remove" : "insert", t, missing, wrong, present, phantom);
	}
	fprintf(stderr, "[%s] %s verified after %s (%d map%s)\n", PM_BACKEND, ops->name,
		phase ? "remove" : "insert", nthreads, nthreads > 1 ? "s" : "");
}

static pm_pool *reopen(pm_pool *pop, const char *path, struct worker *ws, int nthreads)
{
	int err = pm_pool_close(pop);
	if (err != 0)
		die_pm("pm_pool_close", err);
	pop = pm_pool_open(path);
	if (pop == NULL)
		die_pm("pm_pool_open", -1);
	pm_oid root = pm_root(pop, sizeof(struct mb_root));
	if (PM_OID_IS_NULL(root))
		die_pm("pm_root after reopen", -1);
	struct mb_root *r = pm_direct(pop, root);
	for (int t = 0; t < nthreads; t++) {
		if (!PM_OID_EQ(r->map[t], ws[t].map))
			die("after reopen the root's map %d slot changed", t);
		ws[t].pop = pop;
	}
	fprintf(stderr, "[%s] pool closed and reopened\n", PM_BACKEND);
	return pop;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: mapbench --map btree|rbtree|hash [--threads T] [--keys K] [--seed S]\n"
		"                [--dir DIR] [--pool-mib M] [--reopen]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mapname = NULL, *dir = "/dev/shm";
	int nthreads = 1, do_reopen = 0;
	uint64_t nkeys = 1000000, seed = 1, pool_mib = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--reopen")) {
			do_reopen = 1;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			usage();
		if (v == NULL)
			usage();
		if (!strcmp(a, "--map"))
			mapname = v;
		else if (!strcmp(a, "--threads"))
			nthreads = (int)parse_u64(a, v);
		else if (!strcmp(a, "--keys"))
			nkeys = parse_u64(a, v);
		else if (!strcmp(a, "--seed"))
			seed = parse_u64(a, v);
		else if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--pool-mib"))
			pool_mib = parse_u64(a, v);
		else
			usage();
		i++;
	}
	const struct map_ops *ops = NULL;
	if (mapname && !strcmp(mapname, "btree"))
		ops = &btree_map_ops;
	else if (mapname && !strcmp(mapname, "rbtree"))
		ops = &rbtree_map_ops;
	else if (mapname && !strcmp(mapname, "hash"))
		ops = &hash_map_ops;
	else
		usage();
	if (nthreads < 1 || nthreads > MAX_THREADS)
		die("--threads must be 1..%d", MAX_THREADS);
	if (nkeys < (uint64_t)nthreads)
		die("--keys must be at least --threads");
	if (pool_mib == 0) {
		/* 2 GiB, more for more than ~3M keys. */
		pool_mib = 2048;
		uint64_t need = 512 + nkeys * 512 / (1 << 20);
		if (need > pool_mib)
			pool_mib = need;
	}

	char path[4096];
	snprintf(path, sizeof(path), "%s/mapbench-%s-%d.pool", dir, PM_BACKEND, (int)getpid());
	unlink(path);
	uint64_t tc = now_ns();
	pm_pool *pop = pm_pool_create(path, pool_mib << 20);
	if (pop == NULL)
		die_pm("pm_pool_create", -1);
	fprintf(stderr, "[%s] pool %s, %" PRIu64 " MiB, created in %.2f s\n", PM_BACKEND, path,
		pool_mib, (double)(now_ns() - tc) / 1e9);
	pm_oid root = pm_root(pop, sizeof(struct mb_root));
	if (PM_OID_IS_NULL(root))
		die_pm("pm_root", -1);
	struct mb_root *r = pm_direct(pop, root);

	uint64_t *keys = malloc(nkeys * sizeof(uint64_t));
	if (!keys)
		die("out of memory");
	for (uint64_t i = 0; i < nkeys; i++)
		keys[i] = key_of(i, seed);

	struct worker ws[MAX_THREADS];
	memset(ws, 0, sizeof(ws));
	uint64_t at = 0;
	for (int t = 0; t < nthreads; t++) {
		uint64_t n = nkeys / nthreads + ((uint64_t)t < nkeys % nthreads);
		ops->create(pop, &r->map[t]);
		ws[t].idx = t;
		ws[t].pop = pop;
		ws[t].map = r->map[t];
		ws[t].ops = ops;
		ws[t].keys = keys + at;
		ws[t].nkeys = n;
		at += n;
	}

	run_phase(ws, nthreads, 0, ops->name, nkeys);
	verify(pop, ws, nthreads, 0, seed, nkeys);
	if (do_reopen) {
		pop = reopen(pop, path, ws, nthreads);
		verify(pop, ws, nthreads, 0, seed, nkeys);
	}

	rng_t rng;
	rng_seed(&rng, seed * 7919 + 17);
	for (int t = 0; t < nthreads; t++)
		shuffle_u64(ws[t].keys, ws[t].nkeys, &rng);

	run_phase(ws, nthreads, 1, ops->name, nkeys);
	verify(pop, ws, nthreads, 1, seed, nkeys);
	if (do_reopen) {
		pop = reopen(pop, path, ws, nthreads);
		verify(pop, ws, nthreads, 1, seed, nkeys);
	}

	int err = pm_pool_close(pop);
	if (err != 0)
		die_pm("pm_pool_close", err);
	unlink(path);
	free(keys);
	return 0;
}
