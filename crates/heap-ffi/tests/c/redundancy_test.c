/*
 * redundancy_test.c: the C test of protected pools (kv_pool_create_flags with KV_CREATE_LAZY,
 * KV_CREATE_EAGER, KV_CREATE_TXB_PAGE, KV_CREATE_TXB_OBJECT; kv_pool_redundancy;
 * KV_EREFUSED), run by
 * tests/c_api.rs.
 *
 *   redundancy_test DIR      makes its pools in DIR (which must exist)
 *
 * For each mode: create, check the recorded mode, change objects through kv_tx_write and
 * through direct pointers after kv_tx_add_range (and in a fresh block), abort one
 * transaction, close, reopen (the mode comes back), read everything back. In eager and
 * txb-object modes a
 * byte flipped behind the library's back (a store into the mapping outside any transaction,
 * as faulty media would) makes kv_tx_read refuse with KV_EREFUSED.
 *
 * Prints "redundancy_test: N checks, 0 failed" and exits 0 when every check holds; otherwise
 * prints each failed check and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kavach.h"

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

#define POOL_SIZE (48ull << 20)
#define SLOTS 8
#define OBJ 1000

struct root {
	kv_oid slot[SLOTS];
};

static void fill(unsigned char *b, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(seed * 31 + i);
}

static void session(const char *path, int flag)
{
	kv_pool *pop = kv_pool_create_flags(path, POOL_SIZE, flag);
	CHECK(pop != NULL);
	if (!pop)
		return;
	CHECK_EQ(kv_pool_redundancy(pop), flag);
	kv_oid root = kv_root(pop, sizeof(struct root));
	CHECK(!KV_OID_IS_NULL(root));
	struct root *r = kv_direct(pop, root);
	unsigned char want[SLOTS][OBJ];
	for (int i = 0; i < SLOTS; i++) {
		fill(want[i], OBJ, i);
		CHECK_EQ(kv_tx_begin(pop), KV_OK);
		kv_oid o = kv_tx_alloc(pop, OBJ);
		CHECK(!KV_OID_IS_NULL(o));
		unsigned char *p = kv_direct(pop, o);
		if (i % 2)
			memcpy(p, want[i], OBJ); /* a direct store into a fresh block */
		else
			CHECK_EQ(kv_tx_write(pop, p, want[i], OBJ), KV_OK);
		CHECK_EQ(kv_tx_add_range(pop, root, i * sizeof(kv_oid), sizeof(kv_oid)), KV_OK);
		r->slot[i] = o;
		CHECK_EQ(kv_tx_commit(pop), KV_OK);
	}
	/* An overwrite through a pointer after kv_tx_add_range. */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r->slot[3], 10, 100), KV_OK);
	unsigned char *p3 = kv_direct(pop, r->slot[3]);
	memset(p3 + 10, 0x77, 100);
	memset(want[3] + 10, 0x77, 100);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	/* An aborted change leaves nothing behind. */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_tx_add_range(pop, r->slot[5], 0, 64), KV_OK);
	memset(kv_direct(pop, r->slot[5]), 0x11, 64);
	kv_tx_abort(pop, 0);
	CHECK_EQ(kv_pool_close(pop), KV_OK);

	pop = kv_pool_open(path);
	CHECK(pop != NULL);
	if (!pop)
		return;
	CHECK_EQ(kv_pool_redundancy(pop), flag);
	root = kv_root(pop, sizeof(struct root));
	r = kv_direct(pop, root);
	for (int i = 0; i < SLOTS; i++) {
		unsigned char got[OBJ];
		CHECK_EQ(kv_tx_read(pop, got, kv_direct(pop, r->slot[i]), OBJ), KV_OK);
		CHECK(memcmp(got, want[i], OBJ) == 0);
	}
	if (flag == KV_CREATE_EAGER || flag == KV_CREATE_TXB_OBJECT) {
		unsigned char *p = kv_direct(pop, r->slot[2]);
		p[500] ^= 0x10; /* damage: no transaction, no add_range */
		unsigned char got[OBJ];
		CHECK_EQ(kv_tx_read(pop, got, p, OBJ), KV_EREFUSED);
		CHECK(strstr(kv_errormsg(), "refused") != NULL);
		/* Another object still reads. */
		CHECK_EQ(kv_tx_read(pop, got, kv_direct(pop, r->slot[1]), OBJ), KV_OK);
		p[500] ^= 0x10; /* put it back */
		CHECK_EQ(kv_tx_read(pop, got, p, OBJ), KV_OK);
	}
	CHECK_EQ(kv_pool_close(pop), KV_OK);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	const int flags[] = {0, KV_CREATE_LAZY, KV_CREATE_EAGER, KV_CREATE_TXB_PAGE,
			     KV_CREATE_TXB_OBJECT};
	const char *names[] = {"off", "lazy", "eager", "txb-page", "txb-object"};
	for (int i = 0; i < 5; i++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%s.pool", argv[1], names[i]);
		session(path, flags[i]);
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/two.pool", argv[1]);
	CHECK(kv_pool_create_flags(path, POOL_SIZE, KV_CREATE_LAZY | KV_CREATE_EAGER) == NULL);
	CHECK(strstr(kv_errormsg(), "more than one redundancy mode") != NULL);
	snprintf(path, sizeof path, "%s/eager.pool", argv[1]);
	CHECK(kv_pool_open_flags(path, KV_CREATE_EAGER) == NULL);
	printf("redundancy_test: %d checks, %d failed\n", checks, failed);
	return failed ? 1 : 0;
}
