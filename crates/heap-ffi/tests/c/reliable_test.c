/*
 * reliable_test.c: the C test of reliable objects (kv_tx_alloc_flags with KV_ALLOC_RELIABLE,
 * kv_rtx_read, kv_rtx_write, KV_EUNCORRECTABLE), run by tests/c_api.rs.
 *
 *   reliable_test DIR      makes its pool in DIR (which must exist)
 *
 * Bit flips are made by storing into the object's bytes in the mapping directly (as a faulty
 * memory would): a few flipped bits are corrected on read and written back at commit; a stray
 * whole word is KV_EUNCORRECTABLE with a message naming the object and the word.
 *
 * Prints "reliable_test: N checks, 0 failed" and exits 0 when every check holds; otherwise
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

#define POOL_SIZE (32ull << 20)
#define LEN 100

/* The stored data word of logical word `i` (header of 32 bytes, then 16-byte pairs). */
static uint64_t *data_word(kv_pool *pop, kv_oid o, unsigned i)
{
	return (uint64_t *)((char *)kv_direct(pop, o) + 32 + 16 * i);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: reliable_test DIR\n");
		return 2;
	}
	char path[4096];
	snprintf(path, sizeof path, "%s/reliable.pool", argv[1]);
	kv_pool *pop = kv_pool_create(path, POOL_SIZE);
	CHECK(pop != NULL);
	if (!pop)
		return 1;
	kv_oid root = kv_root(pop, 64);
	CHECK(!KV_OID_IS_NULL(root));

	unsigned char want[LEN], got[LEN];
	for (int i = 0; i < LEN; i++)
		want[i] = (unsigned char)(i * 13 + 5);

	/* Allocate and fill. */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	kv_oid o = kv_tx_alloc_flags(pop, LEN, KV_ALLOC_RELIABLE);
	CHECK(!KV_OID_IS_NULL(o));
	memset(got, 0xEE, sizeof got);
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, LEN), KV_OK);
	for (int i = 0; i < LEN; i++)
		CHECK_EQ(got[i], 0); /* a new reliable object is zero */
	CHECK_EQ(kv_rtx_write(pop, o, 0, want, LEN), KV_OK);
	CHECK_EQ(kv_tx_write(pop, kv_direct(pop, root), &o, sizeof o), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK(kv_usable_size(pop, o) >= 32 + 16 * ((LEN + 7) / 8));

	/* Unaligned, sub-word write and read, in redo mode. */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), KV_OK);
	const unsigned char patch[3] = {0xA1, 0xB2, 0xC3};
	CHECK_EQ(kv_rtx_write(pop, o, 45, patch, 3), KV_OK);
	memcpy(want + 45, patch, 3);
	CHECK_EQ(kv_rtx_read(pop, o, 44, got, 5), KV_OK);
	CHECK(memcmp(got, want + 44, 5) == 0);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);

	/* Outside a transaction, past the end, unknown flags. */
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, 8), KV_ENOTX);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_rtx_read(pop, o, 96, got, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK(KV_OID_IS_NULL(kv_tx_alloc_flags(pop, 64, 0x40)));
	CHECK(strstr(kv_errormsg(), "unknown flags") != NULL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	/* A plain block is not a reliable object. */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	kv_oid plain = kv_tx_alloc_flags(pop, 64, 0);
	CHECK(!KV_OID_IS_NULL(plain));
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_rtx_read(pop, plain, 0, got, 8), KV_ECORRUPT);
	CHECK_EQ(kv_tx_commit(pop), KV_ECORRUPT);

	/* Three flipped bits in word 3 (two in the data word, one in its check word): corrected
	 * on read, and the correction is written back at commit. */
	uint64_t clean_data = *data_word(pop, o, 3), clean_check = data_word(pop, o, 3)[1];
	*data_word(pop, o, 3) ^= (1ull << 7) | (1ull << 50);
	data_word(pop, o, 3)[1] ^= 1ull << 33;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	memset(got, 0, sizeof got);
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, LEN), KV_OK);
	CHECK(memcmp(got, want, LEN) == 0);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK(*data_word(pop, o, 3) == clean_data);
	CHECK(data_word(pop, o, 3)[1] == clean_check);

	/* A stray whole-word store into word 5: KV_EUNCORRECTABLE naming the object and word. */
	*data_word(pop, o, 5) = 0x0123456789abcdefull;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, LEN), KV_EUNCORRECTABLE);
	char off_hex[32];
	snprintf(off_hex, sizeof off_hex, "%#" PRIx64, o.off);
	CHECK(strstr(kv_errormsg(), "word 5") != NULL);
	CHECK(strstr(kv_errormsg(), off_hex) != NULL);
	CHECK_EQ(kv_tx_commit(pop), KV_EUNCORRECTABLE);
	/* Words before it still read; a whole-word write replaces it. */
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, 40), KV_OK);
	CHECK(memcmp(got, want, 40) == 0);
	CHECK_EQ(kv_rtx_write(pop, o, 40, want + 40, 8), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);

	/* Durable across close and open. */
	CHECK_EQ(kv_pool_close(pop), KV_OK);
	pop = kv_pool_open(path);
	CHECK(pop != NULL);
	if (!pop)
		return 1;
	CHECK_EQ(kv_tx_begin(pop), KV_OK);
	memset(got, 0, sizeof got);
	CHECK_EQ(kv_rtx_read(pop, o, 0, got, LEN), KV_OK);
	CHECK(memcmp(got, want, LEN) == 0);
	CHECK_EQ(kv_tx_free(pop, o), KV_OK);
	CHECK_EQ(kv_tx_commit(pop), KV_OK);
	CHECK_EQ(kv_pool_close(pop), KV_OK);

	printf("reliable_test: %d checks, %d failed\n", checks, failed);
	return failed ? 1 : 0;
}
