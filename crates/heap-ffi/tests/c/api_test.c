/*
 * api_test.c: the C test of kavach.h, run by tests/c_api.rs.
 *
 *   api_test DIR      makes its pools and files in DIR (which must exist and be empty)
 *
 * Prints "api_test: N checks, 0 failed" and exits 0 when every check holds; otherwise prints
 * each failed check (file, line, expression, kv_errormsg()) and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kavach.h"

_Static_assert(sizeof(kv_oid) == 16, "kv_oid is two 64-bit words");
_Static_assert(sizeof(kv_mutex) == 64, "kv_mutex is 64 bytes");

static int checks, failed;

#define CHECK(cond)                                                                          \
	do {                                                                                 \
		checks++;                                                                    \
		if (!(cond)) {                                                               \
			failed++;                                                            \
			fprintf(stderr, "%s:%d: check failed: %s (kv_errormsg: \"%s\")\n",  \
				__FILE__, __LINE__, #cond, kv_errormsg());                   \
		}                                                                            \
	} while (0)

/* An int-valued expression that must equal `want`. */
#define CHECK_EQ(expr, want)                                                                 \
	do {                                                                                 \
		long long got_ = (long long)(expr), want_ = (long long)(want);               \
		checks++;                                                                    \
		if (got_ != want_) {                                                         \
			failed++;                                                            \
			fprintf(stderr,                                                      \
				"%s:%d: check failed: %s == %lld, expected %lld (kv_errormsg: "  \
				"\"%s\")\n",                                                 \
				__FILE__, __LINE__, #expr, got_, want_, kv_errormsg());      \
		}                                                                            \
	} while (0)

#define POOL_SIZE (64ull << 20)
#define THREADS 2
#define PER_THREAD 2000

struct node {
	kv_oid next;
	uint64_t value;
};

struct root {
	uint64_t value;
	uint64_t other;
	kv_oid a; /* a small block */
	kv_oid b; /* a bigger one */
	kv_mutex lock;
	uint64_t counter; /* guarded by lock */
	kv_oid heads[THREADS];
	uint64_t bytes[8];
};

static char path_a[4096], path_b[4096], path_junk[4096];

static int all_bytes(const void *p, size_t n, unsigned char v)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

static int oid_eq(kv_oid x, kv_oid y)
{
	return x.pool_id == y.pool_id && x.off == y.off;
}

/* ---- basics ------------------------------------------------------------------------------- */

static void test_create_and_root(kv_pool *pop, kv_oid *root_oid)
{
	/* the file exists: no second create, no second open while this one is open */
	CHECK(kv_pool_create(path_a, POOL_SIZE) == NULL);
	CHECK(strlen(kv_errormsg()) > 0);
	CHECK(kv_pool_open(path_a) == NULL);
	CHECK(strstr(kv_errormsg(), "in use") != NULL);

	kv_oid r = kv_root(pop, sizeof(struct root));
	CHECK(!KV_OID_IS_NULL(r));
	CHECK(r.pool_id == kv_pool_id(pop));
	CHECK(kv_pool_id(pop) != 0);
	struct root *root = kv_direct(pop, r);
	CHECK(root != NULL);
	CHECK(all_bytes(root, sizeof(*root), 0));
	CHECK(oid_eq(kv_root(pop, sizeof(struct root)), r));
	CHECK(oid_eq(kv_root(pop, 8), r));
	CHECK(kv_usable_size(pop, r) >= sizeof(struct root));
	/* a larger root than the first is refused */
	CHECK(KV_OID_IS_NULL(kv_root(pop, sizeof(struct root) + 100000)));
	CHECK(strstr(kv_errormsg(), "root") != NULL);
	/* direct and oid_of are inverses, also inside an object */
	CHECK(oid_eq(kv_oid_of(pop, root), r));
	kv_oid inner = kv_oid_of(pop, &root->other);
	CHECK(inner.pool_id == r.pool_id && inner.off == r.off + offsetof(struct root, other));
	CHECK(KV_OID_IS_NULL(kv_oid_of(pop, &r)));
	CHECK(KV_OID_IS_NULL(kv_oid_of(pop, NULL)));
	CHECK(kv_direct(pop, KV_OID_NULL) == NULL);
	*root_oid = r;
}

static void test_commit(kv_pool *pop, kv_oid r)
{
	struct root *root = kv_direct(pop, r);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_active(pop), 1);
	kv_oid a = kv_tx_alloc(pop, 100);
	kv_oid b = kv_tx_zalloc(pop, 5000);
	CHECK(!KV_OID_IS_NULL(a) && !KV_OID_IS_NULL(b));
	memset(kv_direct(pop, a), 0xa5, 100);
	CHECK(all_bytes(kv_direct(pop, b), 5000, 0));
	memset(kv_direct(pop, b), 0x5a, 5000);
	CHECK_EQ(kv_tx_add_range(pop, r, 0, offsetof(struct root, lock)), KV_OK);
	root->value = 7;
	root->a = a;
	root->b = b;
	CHECK_EQ(kv_tx_add_direct(pop, root->bytes, sizeof(root->bytes)), KV_OK);
	memset(root->bytes, 0x11, sizeof(root->bytes));
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK(kv_usable_size(pop, a) >= 100);
	CHECK(kv_usable_size(pop, b) >= 5000);
	CHECK(root->value == 7 && oid_eq(root->a, a) && oid_eq(root->b, b));

	/* free b */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_direct(pop, &root->b, sizeof(root->b)), KV_OK);
	CHECK_EQ(kv_tx_free(pop, root->b), KV_OK);
	root->b = KV_OID_NULL;
	CHECK_EQ(kv_tx_free(pop, KV_OID_NULL), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_usable_size(pop, b), 0);

	/* an empty transaction commits */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
}

static void test_abort(kv_pool *pop, kv_oid r)
{
	struct root *root = kv_direct(pop, r);
	kv_oid a = root->a;

	/* kv_tx_abort rolls back the range, the allocation and the free at once */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 42;
	kv_oid x = kv_tx_alloc(pop, 64);
	CHECK(!KV_OID_IS_NULL(x));
	CHECK_EQ(kv_tx_free(pop, a), KV_OK);
	kv_tx_abort(pop, 0);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(root->value, 7);
	CHECK_EQ(kv_usable_size(pop, x), 0);
	CHECK(kv_usable_size(pop, a) >= 100);
	CHECK(all_bytes(kv_direct(pop, a), 100, 0xa5));
	CHECK_EQ(kv_tx_commit(pop), KV_ENOTX);

	/* a failed call aborts: later calls say so, commit rolls back and returns the first error */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 9;
	CHECK(KV_OID_IS_NULL(kv_tx_alloc(pop, (size_t)1 << 40)));
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, other), 8), KV_EABORTED);
	CHECK(KV_OID_IS_NULL(kv_tx_alloc(pop, 64)));
	CHECK_EQ(kv_tx_active(pop), 1);
	CHECK_EQ(kv_tx_commit(pop), KV_ENOMEM);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(root->value, 7);

	/* the error passed to kv_tx_abort is what the (nested) commit returns; the free of a
	   block allocated in the same transaction is fine */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	x = kv_tx_alloc(pop, 64);
	CHECK_EQ(kv_tx_free(pop, x), KV_OK);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	kv_tx_abort(pop, 77);
	CHECK_EQ(kv_tx_commit(pop), 77);
	CHECK_EQ(kv_tx_active(pop), 0);
}

static void test_nested(kv_pool *pop, kv_oid r)
{
	struct root *root = kv_direct(pop, r);

	/* the inner commit only leaves its level */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 1;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, other), 8), KV_OK);
	root->other = 2;
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_active(pop), 1);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK(root->value == 1 && root->other == 2);

	/* an inner abort aborts everything; the outer commit rolls back both levels */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 5;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, other), 8), KV_OK);
	root->other = 6;
	kv_oid x = kv_tx_zalloc(pop, 64);
	CHECK(!KV_OID_IS_NULL(x));
	kv_tx_abort(pop, KV_EABORTED); /* leaves the inner level */
	CHECK_EQ(kv_tx_active(pop), 1);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_EABORTED);
	CHECK_EQ(kv_tx_begin(pop), KV_EABORTED); /* opens no level */
	CHECK(root->value == 5 && root->other == 6); /* rolled back at the outermost commit */
	CHECK_EQ(kv_tx_commit(pop), KV_EABORTED);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK(root->value == 1 && root->other == 2);
	CHECK_EQ(kv_usable_size(pop, x), 0);

	/* a failure at the inner level also aborts the outer one */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 3;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_direct(pop, &x, sizeof(x)), KV_EINVAL); /* a stack address */
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_active(pop), 1);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(root->value, 1);
}

static void test_errors(kv_pool *pop, kv_oid r)
{
	struct root *root = kv_direct(pop, r);

	/* kv_direct: another pool's id, an offset outside the heap */
	CHECK(kv_direct(pop, (kv_oid){r.pool_id + 1, r.off}) == NULL);
	CHECK(strstr(kv_errormsg(), "another pool") != NULL);
	CHECK(kv_direct(pop, (kv_oid){r.pool_id, 8}) == NULL);
	CHECK(kv_direct(pop, (kv_oid){r.pool_id, UINT64_MAX}) == NULL);
	CHECK(kv_direct(pop, (kv_oid){r.pool_id, POOL_SIZE}) == NULL);
	CHECK_EQ(kv_usable_size(pop, (kv_oid){r.pool_id + 1, r.off}), 0);
	CHECK_EQ(kv_usable_size(pop, (kv_oid){r.pool_id, r.off + 8}), 0);

	/* calls that need a transaction, outside one */
	CHECK_EQ(kv_tx_add_range(pop, r, 0, 8), KV_ENOTX);
	CHECK_EQ(kv_tx_add_direct(pop, root, 8), KV_ENOTX);
	CHECK(KV_OID_IS_NULL(kv_tx_alloc(pop, 64)));
	CHECK_EQ(kv_tx_free(pop, root->a), KV_ENOTX);
	CHECK_EQ(kv_tx_commit(pop), KV_ENOTX);
	kv_tx_abort(pop, 0);
	CHECK(strstr(kv_errormsg(), "no transaction") != NULL);

	/* double free: in two transactions, and twice in one */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	kv_oid c = kv_tx_alloc(pop, 200);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_free(pop, c), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_free(pop, c), KV_EBADFREE);
	CHECK_EQ(kv_tx_commit(pop), KV_EBADFREE);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_free(pop, root->a), KV_OK);
	CHECK_EQ(kv_tx_free(pop, root->a), KV_EBADFREE);
	CHECK_EQ(kv_tx_commit(pop), KV_EBADFREE);
	CHECK(kv_usable_size(pop, root->a) >= 100); /* still allocated */
	/* not the start of a block */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_free(pop, (kv_oid){r.pool_id, root->a.off + 8}), KV_EBADFREE);
	CHECK_EQ(kv_tx_commit(pop), KV_EBADFREE);

	/* bad oids and ranges abort the transaction with KV_EINVAL */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, (kv_oid){r.pool_id + 1, r.off}, 0, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, KV_OID_NULL, 0, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, POOL_SIZE, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r, UINT64_MAX, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_free(pop, (kv_oid){r.pool_id + 1, root->a.off}), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_direct(pop, NULL, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK(KV_OID_IS_NULL(kv_tx_alloc(pop, 0)));
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);

	/* null pool pointers */
	CHECK_EQ(kv_tx_begin(NULL), KV_EINVAL);
	CHECK(strstr(kv_errormsg(), "null") != NULL);
	CHECK(kv_direct(NULL, r) == NULL);
	CHECK_EQ(kv_pool_close(NULL), KV_EINVAL);

	/* mutexes: outside the heap, unlock of one not held */
	kv_mutex on_stack;
	CHECK_EQ(kv_mutex_lock(pop, &on_stack), KV_EINVAL);
	CHECK_EQ(kv_mutex_lock(pop, NULL), KV_EINVAL);
	CHECK_EQ(kv_mutex_unlock(pop, &root->lock), KV_EINVAL);
	CHECK_EQ(kv_mutex_lock(pop, &root->lock), KV_OK);
	CHECK_EQ(kv_mutex_unlock(pop, &root->lock), KV_OK);
	CHECK_EQ(kv_mutex_unlock(pop, &root->lock), KV_EINVAL);

	/* closing with a transaction open on this thread is refused; the pool stays usable */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_pool_close(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_active(pop), 1);
	CHECK_EQ(kv_tx_add_range(pop, r, offsetof(struct root, value), 8), KV_OK);
	root->value = 10;
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(root->value, 10);

	/* files that are not pools */
	FILE *f = fopen(path_junk, "w");
	CHECK(f != NULL);
	if (f) {
		for (int i = 0; i < 100000; i++)
			fputs("not a pool ", f);
		fclose(f);
	}
	CHECK(kv_pool_open(path_junk) == NULL);
	CHECK(strstr(kv_errormsg(), "not a Kavach pool") != NULL);
	CHECK(kv_pool_open("/nonexistent/kavach.pool") == NULL);
	CHECK(strlen(kv_errormsg()) > 0);
	CHECK(kv_pool_open(NULL) == NULL);
	CHECK(kv_pool_create(path_junk, POOL_SIZE) == NULL); /* exists */
	CHECK(kv_pool_create(path_b, 4096) == NULL);         /* too small */
	CHECK(strlen(kv_errormsg()) > 0);
}

/* ---- two pools on one thread ---------------------------------------------------------------- */

static void test_two_pools(kv_pool *pa, kv_oid ra)
{
	kv_pool *pb = kv_pool_create(path_b, POOL_SIZE);
	CHECK(pb != NULL);
	if (!pb)
		return;
	kv_oid rb = kv_root(pb, sizeof(struct root));
	CHECK(!KV_OID_IS_NULL(rb));
	CHECK(kv_pool_id(pa) != kv_pool_id(pb));
	/* an oid of one pool is refused by the other */
	CHECK(kv_direct(pb, ra) == NULL);
	CHECK(kv_direct(pa, rb) == NULL);
	struct root *a = kv_direct(pa, ra), *b = kv_direct(pb, rb);

	/* one transaction on each at once: abort b, commit a */
	uint64_t a_before = a->other;
	CHECK_EQ(kv_tx_begin(pa), KV_OK);
	CHECK_EQ(kv_tx_begin(pb), KV_OK);
	CHECK_EQ(kv_tx_add_range(pa, ra, offsetof(struct root, other), 8), KV_OK);
	CHECK_EQ(kv_tx_add_range(pb, rb, offsetof(struct root, other), 8), KV_OK);
	CHECK_EQ(kv_tx_add_range(pb, ra, offsetof(struct root, value), 8), KV_EINVAL);
	a->other = a_before + 1;
	b->other = 99;
	CHECK_EQ(kv_tx_active(pa), 1);
	CHECK_EQ(kv_tx_active(pb), 1);
	kv_tx_abort(pb, 0);
	CHECK_EQ(kv_tx_active(pb), 0);
	CHECK_EQ(kv_tx_active(pa), 1);
	CHECK_EQ(kv_tx_commit(pa), KV_OK);
	CHECK_EQ(a->other, a_before + 1);
	CHECK_EQ(b->other, 0);
	CHECK_EQ(kv_pool_close(pb), KV_OK);
	CHECK_EQ(kv_pool_close(pb), KV_EINVAL); /* closed twice */
}

/* ---- threads -------------------------------------------------------------------------------- */

struct worker {
	kv_pool *pop;
	kv_oid root;
	int idx;
	int errors;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct root *root = kv_direct(w->pop, w->root);
	for (uint64_t i = 0; i < PER_THREAD; i++) {
		/* the lock is held until the commit is durable */
		if (kv_mutex_lock(w->pop, &root->lock) != KV_OK) {
			w->errors++;
			continue;
		}
		int err = kv_tx_begin(w->pop);
		kv_oid n = kv_tx_alloc(w->pop, sizeof(struct node));
		if (!KV_OID_IS_NULL(n)) {
			struct node *node = kv_direct(w->pop, n);
			node->next = root->heads[w->idx];
			node->value = i;
		}
		if (!err)
			err = kv_tx_add_direct(w->pop, &root->heads[w->idx], sizeof(kv_oid));
		root->heads[w->idx] = n;
		if (!err)
			err = kv_tx_add_direct(w->pop, &root->counter, sizeof(root->counter));
		root->counter++;
		int cerr = kv_tx_commit(w->pop);
		if (err || cerr || KV_OID_IS_NULL(n)) {
			fprintf(stderr, "worker %d: %d/%d: %s\n", w->idx, err, cerr, kv_errormsg());
			w->errors++;
		}
		if (kv_mutex_unlock(w->pop, &root->lock) != KV_OK)
			w->errors++;
	}
	return NULL;
}

/* Exits with a transaction open: the library rolls it back when the thread ends. */
static void *quitter_main(void *arg)
{
	struct worker *w = arg;
	struct root *root = kv_direct(w->pop, w->root);
	if (kv_tx_begin(w->pop) != KV_OK || kv_tx_begin(w->pop) != KV_OK ||
	    kv_tx_add_direct(w->pop, &root->value, 8) != KV_OK)
		w->errors++;
	root->value = 12345;
	return NULL;
}

static uint64_t list_check(kv_pool *pop, kv_oid head)
{
	uint64_t n = 0, want = PER_THREAD;
	for (kv_oid at = head; !KV_OID_IS_NULL(at); n++) {
		const struct node *node = kv_direct(pop, at);
		if (!node || node->value != want - 1 || n > PER_THREAD)
			return UINT64_MAX;
		want--;
		at = node->next;
	}
	return n;
}

static void test_threads(kv_pool *pop, kv_oid r)
{
	struct root *root = kv_direct(pop, r);
	struct worker w[THREADS];
	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){.pop = pop, .root = r, .idx = t};
		CHECK_EQ(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
	}
	for (int t = 0; t < THREADS; t++) {
		CHECK_EQ(pthread_join(th[t], NULL), 0);
		CHECK_EQ(w[t].errors, 0);
		CHECK_EQ(list_check(pop, root->heads[t]), PER_THREAD);
	}
	CHECK_EQ(root->counter, THREADS * PER_THREAD);

	uint64_t value = root->value;
	struct worker q = {.pop = pop, .root = r};
	CHECK_EQ(pthread_create(&th[0], NULL, quitter_main, &q), 0);
	CHECK_EQ(pthread_join(th[0], NULL), 0);
	CHECK_EQ(q.errors, 0);
	CHECK_EQ(root->value, value);
	/* its lane is free again and not inside a transaction */
	for (int i = 0; i < 200; i++) {
		CHECK_EQ(kv_tx_begin(pop), KV_OK);
		CHECK_EQ(kv_tx_add_direct(pop, &root->value, 8), KV_OK);
		root->value++;
		CHECK_EQ(kv_tx_commit(pop), KV_OK);
	}
	CHECK_EQ(root->value, value + 200);
}

/* ---- reopen --------------------------------------------------------------------------------- */

/* A thread that used the pool and is still alive when it is closed and opened again. */
struct lingerer {
	kv_pool *old, *reopened;
	kv_oid root;
	pthread_barrier_t used, reopened_ready;
	int errors;
};

static void *lingerer_main(void *arg)
{
	struct lingerer *l = arg;
	if (kv_tx_begin(l->old) != KV_OK || kv_tx_add_range(l->old, l->root, 0, 8) != KV_OK ||
	    kv_tx_commit(l->old) != KV_OK)
		l->errors++;
	pthread_barrier_wait(&l->used);
	pthread_barrier_wait(&l->reopened_ready);
	kv_pool *pop = l->reopened;
	if (pop) {
		/* nothing of the old handle is taken for the new one, even at the same address */
		if (kv_tx_active(pop) != 0 || kv_tx_begin(pop) != KV_OK || kv_tx_active(pop) != 1 ||
		    kv_tx_add_range(pop, l->root, 0, 8) != KV_OK || kv_tx_commit(pop) != KV_OK)
			l->errors++;
	}
	return NULL;
}

/* Close the pool while another thread that used it lives on, then open it again. */
static kv_pool *close_and_reopen(kv_pool *pop, kv_oid r)
{
	struct lingerer l = {.old = pop, .root = r};
	pthread_t th;
	pthread_barrier_init(&l.used, NULL, 2);
	pthread_barrier_init(&l.reopened_ready, NULL, 2);
	CHECK_EQ(pthread_create(&th, NULL, lingerer_main, &l), 0);
	pthread_barrier_wait(&l.used);
	CHECK_EQ(kv_pool_close(pop), KV_OK);
	l.reopened = kv_pool_open(path_a);
	CHECK(l.reopened != NULL);
	pthread_barrier_wait(&l.reopened_ready);
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(l.errors, 0);
	pthread_barrier_destroy(&l.used);
	pthread_barrier_destroy(&l.reopened_ready);
	return l.reopened;
}

static void test_reopen(kv_pool *pop, kv_oid r_before)
{
	if (!pop)
		return;
	kv_oid r = kv_root(pop, sizeof(struct root));
	CHECK(oid_eq(r, r_before));
	struct root *root = kv_direct(pop, r);
	CHECK(root != NULL);
	if (root) {
		CHECK_EQ(root->value, 210);
		CHECK_EQ(root->other, 3);
		CHECK(all_bytes(root->bytes, sizeof(root->bytes), 0x11));
		CHECK(all_bytes(kv_direct(pop, root->a), 100, 0xa5));
		CHECK(KV_OID_IS_NULL(root->b));
		CHECK_EQ(root->counter, THREADS * PER_THREAD);
		for (int t = 0; t < THREADS; t++)
			CHECK_EQ(list_check(pop, root->heads[t]), PER_THREAD);
		/* the mutex is free after open */
		CHECK_EQ(kv_mutex_lock(pop, &root->lock), KV_OK);
		CHECK_EQ(kv_mutex_unlock(pop, &root->lock), KV_OK);
		/* free one list; the blocks come back */
		CHECK_EQ(kv_tx_begin(pop), KV_OK);
		for (kv_oid at = root->heads[0]; !KV_OID_IS_NULL(at);) {
			kv_oid next = ((struct node *)kv_direct(pop, at))->next;
			CHECK_EQ(kv_tx_free(pop, at), KV_OK);
			at = next;
		}
		CHECK_EQ(kv_tx_add_direct(pop, &root->heads[0], sizeof(kv_oid)), KV_OK);
		root->heads[0] = KV_OID_NULL;
		CHECK_EQ(kv_tx_commit(pop), KV_OK);
	}
	CHECK_EQ(kv_pool_close(pop), KV_OK);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: api_test DIR\n");
		return 2;
	}
	snprintf(path_a, sizeof(path_a), "%s/a.pool", argv[1]);
	snprintf(path_b, sizeof(path_b), "%s/b.pool", argv[1]);
	snprintf(path_junk, sizeof(path_junk), "%s/junk", argv[1]);
	CHECK(strcmp(kv_errormsg(), "") == 0);

	kv_pool *pop = kv_pool_create(path_a, POOL_SIZE);
	if (!pop) {
		fprintf(stderr, "kv_pool_create %s: %s\n", path_a, kv_errormsg());
		return 1;
	}
	kv_oid r;
	test_create_and_root(pop, &r);
	test_commit(pop, r);
	test_abort(pop, r);
	test_nested(pop, r);
	test_errors(pop, r);
	test_two_pools(pop, r);
	test_threads(pop, r);
	pop = close_and_reopen(pop, r);
	test_reopen(pop, r);

	printf("api_test: %d checks, %d failed\n", checks, failed);
	return failed == 0 ? 0 : 1;
}
