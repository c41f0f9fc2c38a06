/*
 * tx_loop.c: the cost of a small overwrite transaction through kavach.h.
 *
 *   tx_loop POOL [N [SIZE]]   create POOL (which must not exist), run N (default 200000)
 *                             transactions of kv_tx_begin, kv_tx_add_direct SIZE (default 64)
 *                             bytes, memset, kv_tx_commit on one block, print ns per
 *                             transaction, close and remove POOL
 *
 * Build (release library):
 *   cargo build --release -p kavach-heap-ffi
 *   cc -O2 -I crates/heap-ffi/include crates/heap-ffi/examples/c/tx_loop.c \
 *      target/release/libkavach.a -lpthread -ldl -lm -o tx_loop
 *   ./tx_loop /dev/shm/tx_loop.pool
 *
 * A measurement, not a benchmark comparison: bench/heap/ compares with libpmemobj.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kavach.h"

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int die(const char *what, int err)
{
	fprintf(stderr, "tx_loop: %s failed (%d): %s\n", what, err, kv_errormsg());
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: tx_loop POOL [N [SIZE]]\n");
		return 2;
	}
	long n = argc > 2 ? strtol(argv[2], NULL, 10) : 200000;
	size_t size = argc > 3 ? (size_t)strtoul(argv[3], NULL, 10) : 64;
	if (n <= 0 || size == 0 || size > 65536) {
		fprintf(stderr, "tx_loop: N must be positive and SIZE in 1..65536\n");
		return 2;
	}
	kv_pool *pop = kv_pool_create(argv[1], 256ull << 20);
	if (!pop)
		return die("kv_pool_create", -1);
	int err = kv_tx_begin(pop);
	kv_oid block = kv_tx_zalloc(pop, size);
	int cerr = kv_tx_commit(pop);
	if (err || cerr || KV_OID_IS_NULL(block))
		return die("setup", err ? err : cerr);
	unsigned char *p = kv_direct(pop, block);

	long warmup = n / 10;
	double start = 0;
	for (long i = -warmup; i < n; i++) {
		if (i == 0)
			start = now_ns();
		if ((err = kv_tx_begin(pop)) != 0)
			return die("kv_tx_begin", err);
		if ((err = kv_tx_add_direct(pop, p, size)) != 0)
			return die("kv_tx_add_direct", err);
		memset(p, (int)(i & 0xff), size);
		if ((err = kv_tx_commit(pop)) != 0)
			return die("kv_tx_commit", err);
	}
	double ns = (now_ns() - start) / (double)n;
	printf("tx_loop: %ld transactions of %zu bytes: %.1f ns each\n", n, size, ns);
	if ((err = kv_pool_close(pop)) != 0)
		return die("kv_pool_close", err);
	unlink(argv[1]);
	return 0;
}
