/*
 * nested_abort.c: what kv_tx_commit does at a nested level after the transaction was aborted.
 *
 * kavach.h: "Transactions nest by flattening: only the outermost commit commits, and an abort
 * anywhere aborts all." kv_tx_commit: "Commit (outermost) or leave a nested level. 0, or the
 * error that aborted the tx." kv_tx_abort: "every added range is rolled back before this returns
 * (outermost level) or at the outermost kv_tx_commit (nested)."
 *
 * Read that way, after an abort at nesting depth 2 the first kv_tx_commit leaves the inner
 * level (returning the error) and the second, outermost one rolls back and ends the
 * transaction. This program prints what happens, for an explicit kv_tx_abort and for a failed
 * call (an impossible allocation) at the inner level, and exits 1 if the outer kv_tx_commit
 * does not find the transaction it began.
 *
 *   gcc -O1 -I crates/heap-ffi/include bench/heap/repro/nested_abort.c \
 *       target/release/libkavach.a -lpthread -ldl -lm -o /tmp/nested_abort && /tmp/nested_abort
 */
#include <stdio.h>
#include <unistd.h>

#include "kavach.h"

static int run(kv_pool *p, kv_oid r, int explicit_abort)
{
	unsigned char *b = kv_direct(p, r);
	int rc, bad = 0;
	printf("--- nested %s\n", explicit_abort ? "kv_tx_abort" : "failed kv_tx_alloc");
	rc = kv_tx_begin(p);
	printf("outer kv_tx_begin -> %d\n", rc);
	rc = kv_tx_add_range(p, r, 0, 8);
	printf("kv_tx_add_range -> %d\n", rc);
	b[0] = 2;
	rc = kv_tx_begin(p);
	printf("inner kv_tx_begin -> %d\n", rc);
	if (explicit_abort) {
		kv_tx_abort(p, KV_EABORTED);
		printf("inner kv_tx_abort: active=%d b[0]=%d\n", kv_tx_active(p), b[0]);
	} else {
		kv_oid o = kv_tx_alloc(p, (size_t)1 << 40);
		printf("inner kv_tx_alloc(1 TiB) -> off %llu (%s); active=%d b[0]=%d\n",
		       (unsigned long long)o.off, kv_errormsg(), kv_tx_active(p), b[0]);
	}
	rc = kv_tx_commit(p);
	int active = kv_tx_active(p);
	printf("inner kv_tx_commit -> %d; active=%d b[0]=%d   (expected: the error, active=1)\n", rc,
	       active, b[0]);
	if (!active)
		bad = 1;
	rc = kv_tx_commit(p);
	printf("outer kv_tx_commit -> %d (%s); active=%d b[0]=%d   (expected: the error, active=0, "
	       "b[0]=0)\n",
	       rc, rc ? kv_errormsg() : "", kv_tx_active(p), b[0]);
	if (rc == KV_ENOTX || b[0] != 0)
		bad = 1;
	return bad;
}

int main(void)
{
	const char *path = "/dev/shm/kv-nested-abort-repro.pool";
	unlink(path);
	kv_pool *p = kv_pool_create(path, 64ull << 20);
	if (!p) {
		printf("kv_pool_create: %s\n", kv_errormsg());
		return 2;
	}
	kv_oid r = kv_root(p, 64);
	int bad = run(p, r, 1);
	bad |= run(p, r, 0);
	kv_pool_close(p);
	unlink(path);
	printf(bad ? "RESULT: the inner kv_tx_commit ended the whole transaction\n"
		   : "RESULT: as documented\n");
	return bad;
}
