/*
 * pm.h: one small persistent-heap interface over two libraries, so that the benchmark and map
 * code in this directory is written once and compiled twice:
 *
 *   -DKV_BACKEND_PMEMOBJ   libpmemobj (PMDK 1.12), public API only     (link -lpmemobj)
 *   -DKV_BACKEND_KAVACH    Kavach's heap, kavach.h only                (link libkavach.a)
 *
 * Both sides run the same control flow: no setjmp. On libpmemobj the transaction is begun with
 * a NULL jmp_buf, so a failing call (add_range, alloc, free) aborts the transaction and returns
 * an error instead of jumping; the caller must then stop issuing transactional calls and finish
 * with pm_tx_commit(), which for an aborted transaction only ends it and returns its error.
 * Kavach documents the same shape: a failed call marks the transaction aborted and
 * kv_tx_commit() rolls it back and returns the first error.
 *
 * Every pm_* function that can fail returns 0 (or a non-null oid / pointer) on success; the
 * error values are the library's own (errno values for pmemobj, KV_E* for Kavach): the
 * harness only tests them against 0 and prints them with pm_errormsg().
 *
 * Durability is the same on both sides: plain add_range (no NO_FLUSH / NO_SNAPSHOT flags), so
 * every snapshotted range and every block allocated in the transaction is flushed and fenced
 * by the outermost commit.
 *
 * Kavach has a second build, -DKV_BACKEND_KAVACH -DKV_KAVACH_REDO ("kavach-redo"), whose
 * PM_TX_MODE is redo. Code that should run in the build's mode begins with
 * pm_tx_begin_mode(pop, PM_TX_MODE) and touches persistent memory in that transaction only
 * with pm_write / pm_write_fresh / pm_read (plain pm_tx_begin stays undo on every build, for
 * set-up code and the maps, which store directly):
 *
 *   pm_write(pop, dst, src, len)        store into persistent memory
 *       pmemobj, kavach: add_range_direct(dst, len) + memcpy (the same work as before)
 *       kavach-redo:     kv_tx_write
 *   pm_write_fresh(pop, dst, src, len)  store into a block allocated in this transaction
 *       pmemobj, kavach: memcpy (no snapshot: the commit flushes the block)
 *       kavach-redo:     kv_tx_write (a redo transaction logs every store)
 *   pm_read(pop, dst, src, len)         load from persistent memory
 *       pmemobj, kavach: memcpy
 *       kavach-redo:     kv_tx_read (sees the transaction's own writes)
 */
#ifndef KV_BENCH_PM_H
#define KV_BENCH_PM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(KV_BACKEND_PMEMOBJ) == defined(KV_BACKEND_KAVACH)
#error "define exactly one of KV_BACKEND_PMEMOBJ and KV_BACKEND_KAVACH"
#endif
#if defined(KV_KAVACH_REDO) && !defined(KV_BACKEND_KAVACH)
#error "KV_KAVACH_REDO goes with KV_BACKEND_KAVACH"
#endif

/* ------------------------------------------------------------------------------------------ */
#if defined(KV_BACKEND_PMEMOBJ)

#include <libpmemobj.h>

#define PM_BACKEND "pmemobj"
#define PM_LAYOUT "kavach-heap-bench"

typedef PMEMobjpool pm_pool;
typedef PMEMoid pm_oid;

#define PM_OID_NULL ((PMEMoid){0, 0})
#define PM_OID_IS_NULL(o) ((o).off == 0)

static inline pm_pool *pm_pool_create(const char *path, uint64_t size)
{
	return pmemobj_create(path, PM_LAYOUT, (size_t)size, 0600);
}

static inline pm_pool *pm_pool_open(const char *path)
{
	return pmemobj_open(path, PM_LAYOUT);
}

static inline int pm_pool_close(pm_pool *pop)
{
	pmemobj_close(pop);
	return 0;
}

static inline pm_oid pm_root(pm_pool *pop, size_t size)
{
	return pmemobj_root(pop, size);
}

static inline void *pm_direct(pm_pool *pop, pm_oid oid)
{
	(void)pop;
	return pmemobj_direct(oid);
}

static inline const char *pm_errormsg(void)
{
	return pmemobj_errormsg();
}

/*
 * Begin a transaction without a jmp_buf. pmemobj_tx_end() must follow every
 * pmemobj_tx_begin(), even a failed one, so a failed begin is ended here.
 */
static inline int pm_tx_begin(pm_pool *pop)
{
	int ret = pmemobj_tx_begin(pop, NULL, TX_PARAM_NONE);
	if (ret != 0 || pmemobj_tx_stage() != TX_STAGE_WORK) {
		int end = pmemobj_tx_end();
		return ret != 0 ? ret : (end != 0 ? end : -1);
	}
	return 0;
}

static inline int pm_tx_add_range(pm_pool *pop, pm_oid oid, uint64_t off, size_t len)
{
	(void)pop;
	return pmemobj_tx_add_range(oid, off, len);
}

static inline int pm_tx_add_direct(pm_pool *pop, void *ptr, size_t len)
{
	(void)pop;
	return pmemobj_tx_add_range_direct(ptr, len);
}

static inline pm_oid pm_tx_alloc(pm_pool *pop, size_t size)
{
	(void)pop;
	return pmemobj_tx_alloc(size, 0);
}

static inline pm_oid pm_tx_zalloc(pm_pool *pop, size_t size)
{
	(void)pop;
	return pmemobj_tx_zalloc(size, 0);
}

static inline int pm_tx_free(pm_pool *pop, pm_oid oid)
{
	(void)pop;
	return pmemobj_tx_free(oid);
}

/*
 * Commit the outermost transaction and end it: 0, or the error that aborted it. If a call in
 * the transaction failed, the stage is already ONABORT (undo applied); then only end it.
 */
static inline int pm_tx_commit(pm_pool *pop)
{
	(void)pop;
	if (pmemobj_tx_stage() == TX_STAGE_WORK)
		pmemobj_tx_commit();
	return pmemobj_tx_end();
}

/* Abort (roll back) and end the transaction. */
static inline void pm_tx_abort(pm_pool *pop, int err)
{
	(void)pop;
	if (pmemobj_tx_stage() == TX_STAGE_WORK)
		pmemobj_tx_abort(err);
	(void)pmemobj_tx_end();
}

static inline int pm_tx_active(pm_pool *pop)
{
	(void)pop;
	return pmemobj_tx_stage() != TX_STAGE_NONE;
}

#define PM_TX_UNDO 0
#define PM_TX_REDO 1
#define PM_TX_MODE PM_TX_UNDO

/* libpmemobj has one mode (undo): a plain begin. */
static inline int pm_tx_begin_mode(pm_pool *pop, int mode)
{
	(void)mode;
	return pm_tx_begin(pop);
}

static inline int pm_write(pm_pool *pop, void *dst, const void *src, size_t len)
{
	(void)pop;
	int err = pmemobj_tx_add_range_direct(dst, len);
	if (err == 0)
		memcpy(dst, src, len);
	return err;
}

static inline int pm_write_fresh(pm_pool *pop, void *dst, const void *src, size_t len)
{
	(void)pop;
	memcpy(dst, src, len);
	return 0;
}

static inline int pm_read(pm_pool *pop, void *dst, const void *src, size_t len)
{
	(void)pop;
	memcpy(dst, src, len);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
#elif defined(KV_BACKEND_KAVACH)

#include "kavach.h"

#if defined(KV_KAVACH_REDO)
#define PM_BACKEND "kavach-redo"
#else
#define PM_BACKEND "kavach"
#endif

typedef kv_pool pm_pool;
typedef kv_oid pm_oid;

#define PM_OID_NULL ((kv_oid){0, 0})
#define PM_OID_IS_NULL(o) KV_OID_IS_NULL(o)

/* KAVACH_ON_DEMAND_MS=W (kavach-redo only): durability on demand, saved on SIGPWR within W ms
 * (kv_pool_on_demand); without it, redo commits flush at commit. A pool where it cannot be
 * turned on is closed and NULL returned (the run fails rather than measure the other mode). */
static inline pm_pool *pm_kavach_mode(pm_pool *pop)
{
#if defined(KV_KAVACH_REDO)
	const char *w = getenv("KAVACH_ON_DEMAND_MS");
	if (pop && w && *w) {
		if (kv_pool_on_demand(pop, atof(w)) != KV_OK || kv_pool_durability(pop) != 1) {
			fprintf(stderr, "kv_pool_on_demand(%s ms): %s\n", w, kv_errormsg());
			kv_pool_close(pop);
			return NULL;
		}
	}
#endif
	return pop;
}

/* KV_CREATE_MODE (a -D of run.sh --redundancy): the heap's redundancy, one of the
 * KV_CREATE_* flags of kv_pool_create_flags; 0 (none) without it. */
#ifndef KV_CREATE_MODE
#define KV_CREATE_MODE 0
#endif

static inline pm_pool *pm_pool_create(const char *path, uint64_t size)
{
	pm_pool *pop = kv_pool_create_flags(path, size, KV_CREATE_MODE);
	if (pop && kv_pool_redundancy(pop) != KV_CREATE_MODE) {
		fprintf(stderr, "kv_pool_redundancy: %d, not the %d asked for\n",
			kv_pool_redundancy(pop), KV_CREATE_MODE);
		kv_pool_close(pop);
		return NULL;
	}
	return pm_kavach_mode(pop);
}

static inline pm_pool *pm_pool_open(const char *path)
{
	return pm_kavach_mode(kv_pool_open(path));
}

static inline int pm_pool_close(pm_pool *pop)
{
	return kv_pool_close(pop);
}

static inline pm_oid pm_root(pm_pool *pop, size_t size)
{
	return kv_root(pop, size);
}

static inline void *pm_direct(pm_pool *pop, pm_oid oid)
{
	return kv_direct(pop, oid);
}

static inline const char *pm_errormsg(void)
{
	return kv_errormsg();
}

static inline int pm_tx_begin(pm_pool *pop)
{
	return kv_tx_begin(pop);
}

static inline int pm_tx_add_range(pm_pool *pop, pm_oid oid, uint64_t off, size_t len)
{
	return kv_tx_add_range(pop, oid, off, len);
}

static inline int pm_tx_add_direct(pm_pool *pop, void *ptr, size_t len)
{
	return kv_tx_add_direct(pop, ptr, len);
}

static inline pm_oid pm_tx_alloc(pm_pool *pop, size_t size)
{
	return kv_tx_alloc(pop, size);
}

static inline pm_oid pm_tx_zalloc(pm_pool *pop, size_t size)
{
	return kv_tx_zalloc(pop, size);
}

static inline int pm_tx_free(pm_pool *pop, pm_oid oid)
{
	return kv_tx_free(pop, oid);
}

/* 0, or the error that aborted the transaction (kv_tx_commit rolls an aborted one back). */
static inline int pm_tx_commit(pm_pool *pop)
{
	return kv_tx_commit(pop);
}

/*
 * Abort (roll back) and end the transaction. kavach.h does not say whether the thread is still
 * in the (aborted) transaction after an outermost kv_tx_abort (the library as built on
 * 2026-11-22 ends it: kv_tx_active() is 0 and a kv_tx_commit would return KV_ENOTX); if
 * kv_tx_active() says it is, end it with kv_tx_commit (which returns the abort's error).
 */
static inline void pm_tx_abort(pm_pool *pop, int err)
{
	kv_tx_abort(pop, err);
	if (kv_tx_active(pop))
		(void)kv_tx_commit(pop);
}

static inline int pm_tx_active(pm_pool *pop)
{
	return kv_tx_active(pop);
}

#define PM_TX_UNDO KV_TX_UNDO
#define PM_TX_REDO KV_TX_REDO

static inline int pm_tx_begin_mode(pm_pool *pop, int mode)
{
	return kv_tx_begin_mode(pop, mode);
}

#if defined(KV_KAVACH_REDO)
#define PM_TX_MODE PM_TX_REDO

static inline int pm_write(pm_pool *pop, void *dst, const void *src, size_t len)
{
	return kv_tx_write(pop, dst, src, len);
}

static inline int pm_write_fresh(pm_pool *pop, void *dst, const void *src, size_t len)
{
	return kv_tx_write(pop, dst, src, len);
}

static inline int pm_read(pm_pool *pop, void *dst, const void *src, size_t len)
{
	return kv_tx_read(pop, dst, src, len);
}
#else
#define PM_TX_MODE PM_TX_UNDO

static inline int pm_write(pm_pool *pop, void *dst, const void *src, size_t len)
{
	int err = kv_tx_add_direct(pop, dst, len);
	if (err == 0)
		memcpy(dst, src, len);
	return err;
}

static inline int pm_write_fresh(pm_pool *pop, void *dst, const void *src, size_t len)
{
	(void)pop;
	memcpy(dst, src, len);
	return 0;
}

static inline int pm_read(pm_pool *pop, void *dst, const void *src, size_t len)
{
	(void)pop;
	memcpy(dst, src, len);
	return 0;
}
#endif

#endif

/* ------------------------------------------------------------------------------------------ */
/* Shared helpers (both backends). */

/* Both oid types are {uint64 pool id, uint64 offset}; oids of one pool compare by offset. */
#define PM_OID_EQ(a, b) ((a).off == (b).off)

_Static_assert(sizeof(pm_oid) == 16, "a persistent pointer is 16 bytes on both backends");

/* The abort code the harness passes to pm_tx_abort (a logical error, not a library one). */
#define PM_EBENCH 125

#endif /* KV_BENCH_PM_H */
