/*
 * kavach.h: the C interface to Kavach's persistent heap (crate `kavach-heap-ffi`).
 *
 * A pool is a file (normally on a DAX file system or, for testing, /dev/shm) holding one heap
 * region. Persistent pointers are `kv_oid` values: the pool's 64-bit id and a byte offset inside
 * the heap. `kv_direct` turns one into an address valid while the pool stays open.
 *
 * Transactions run in one of two modes, chosen when the outermost level begins:
 *  - undo (kv_tx_begin, or kv_tx_begin_mode with KV_TX_UNDO): call kv_tx_add_range (or
 *    kv_tx_add_direct) on every range before its first change in a transaction, then store to
 *    it directly; or store with kv_tx_write, which does both. kv_tx_commit makes every added
 *    range and every block allocated in the transaction durable (flush and fence) before it
 *    returns.
 *  - redo (kv_tx_begin_mode with KV_TX_REDO): change persistent memory only with kv_tx_write
 *    and read what the transaction wrote with kv_tx_read; the new bytes are kept in a log in
 *    DRAM and applied in place by kv_tx_commit. A direct store is not part of a redo
 *    transaction, and a direct load sees the committed bytes, not the transaction's writes.
 *    On a heap with durability on demand, a thread that admission refused runs its redo
 *    transactions as undo ones (kv_tx_mode says so); code written to the redo rules is correct
 *    either way. KV_TX_ISOLATED is redo mode whose reads and writes also pass the heap's STM:
 *    no user lock is needed, and a conflict with a concurrent commit fails the transaction
 *    with KV_ECONFLICT (abort it and run it again). Allocation and free inside a transaction take effect only at commit. Transactions
 * nest by flattening: only the outermost commit commits, and an abort anywhere aborts all.
 * A transaction belongs to the thread that began it; threads run transactions in parallel,
 * each on its own lane (log), up to the pool's lane count.
 *
 * Errors: functions that can fail return 0 (or a non-null pointer / non-null oid) on success
 * and a KV_E* code (or null) on failure; kv_errormsg() describes the last failure of the
 * calling thread. A failed call inside a transaction marks it aborted: every later call
 * returns KV_EABORTED and kv_tx_commit rolls it back and returns the first error.
 * ("Calls inside a transaction" are the kv_tx_* calls of the thread on that pool; kv_root,
 * kv_usable_size and the kv_mutex calls are not part of it.)
 *
 * Threads and lifetime: a kv_pool * may be used by any number of threads at once, except that
 * kv_pool_close must not overlap any other call on the same pool, and the pointer is invalid
 * once kv_pool_close has closed it. Several pools may be open at once; a thread may have one
 * transaction per pool. A thread that ends inside a transaction has it rolled back when it
 * exits (by its thread-exit handlers); a process that exits inside one has it rolled back by
 * the next kv_pool_open.
 *
 * Usage trap: a pool opened or created with KV_OPEN_TRAP (or with KAVACH_TRAP=1 in the
 * environment, for any open or create) hands out addresses from kv_direct in a reserved range
 * with no access, of the pool's size, instead of addresses in its mapping. The library
 * translates them (kv_tx_write, kv_tx_read, kv_tx_add_direct, kv_oid_of, kv_mutex_*), so a
 * program that follows the redo rules runs unchanged; a direct load or store through one
 * faults at once, and the library's SIGSEGV handler (installed when the first trapped pool
 * opens, passing other faults to the handler that was there before) prints a message naming
 * the rule and the address to stderr, then the process dies of SIGSEGV. A debugging aid: a
 * trapped pool's addresses are valid only until it is closed, like any others.
 */
#ifndef KAVACH_H
#define KAVACH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (negated errno-like values are not used: these are stable). */
#define KV_OK 0
#define KV_EINVAL 1      /* a bad argument (null pointer, zero size, wrong pool) */
#define KV_ENOMEM 2      /* the heap has no block of that size */
#define KV_ENOTX 3       /* the call needs a transaction and the thread has none */
#define KV_EABORTED 4    /* the transaction was aborted (by kv_tx_abort or an earlier error) */
#define KV_ETXTOOBIG 5   /* the transaction's undo or redo log is full */
#define KV_EIO 6         /* the medium failed (flush, msync, I/O) */
#define KV_ECORRUPT 7    /* damaged metadata was found (kv_errormsg names what and where) */
#define KV_EBADFREE 8    /* free of something that is not an allocated block */
#define KV_EEXIST 9      /* kv_pool_create: the file exists */
#define KV_EBUSY 10      /* the pool is locked by another process */
#define KV_EUNCORRECTABLE 11 /* a word of a reliable object cannot be corrected (kv_errormsg
                              * names the object and the word) */
#define KV_ENOTSAVED 12  /* open: on-demand commits were never saved; the heap may be torn */
#define KV_ECONFLICT 13  /* an isolated transaction met a concurrent commit: run it again */
#define KV_EREFUSED 14   /* a verified read (eager or txb-object redundancy) found damage:
                          * refused, not served; in eager mode `kavach integrity repair`
                          * rebuilds it from parity */

/* Transaction modes (kv_tx_begin_mode, kv_tx_mode). */
#define KV_TX_UNDO 0     /* old bytes logged in PM before each change (kv_tx_begin's mode) */
#define KV_TX_REDO 1     /* new bytes logged in DRAM, applied at commit */
#define KV_TX_ISOLATED 2 /* redo, isolated by an STM: no user locks; KV_ECONFLICT: run again */

/* Flags of kv_pool_create_flags and kv_pool_open_flags. */
#define KV_OPEN_TRAP 1   /* the usage trap (see above) */
/* Redundancy of a new pool's heap (kv_pool_create_flags only; at most one), recorded in the
 * pool: every later open keeps it in that mode. Eager and txb-page keep an object's
 * redundancy at the commit of the transaction that changed it: store into objects only
 * inside transactions, after kv_tx_add_range (or into blocks allocated in the transaction). */
#define KV_CREATE_LAZY 2     /* write tracking and a background pass every second (Vilamb) */
#define KV_CREATE_EAGER 4    /* from each commit's old and new bytes (TVARAK) */
#define KV_CREATE_TXB_PAGE 8 /* each commit recomputes the pages it touched */
#define KV_CREATE_TXB_OBJECT 16 /* a checksum per object a commit changed, verified by
                                 * kv_tx_read (KV_EREFUSED); detection only, no parity */

typedef struct kv_pool kv_pool;

/* A persistent pointer. The null oid is {0, 0}. */
typedef struct kv_oid {
	uint64_t pool_id; /* low 64 bits of the pool's UUID */
	uint64_t off;     /* byte offset inside the heap region */
} kv_oid;

#define KV_OID_NULL ((kv_oid){0, 0})
#define KV_OID_IS_NULL(o) ((o).off == 0)

/* Create a pool file of `size` bytes at `path` (which must not exist). NULL on failure
 * (kv_errormsg says why: the file exists, the size is too small, ...). */
kv_pool *kv_pool_create(const char *path, uint64_t size);
/* Open the pool at `path` and recover it (roll back or finish interrupted transactions).
 * NULL on failure, also while the pool is open (in this process or another). */
kv_pool *kv_pool_open(const char *path);
/* kv_pool_create and kv_pool_open with flags (KV_OPEN_TRAP, or 0). Unknown flags: NULL,
 * KV_EINVAL. */
kv_pool *kv_pool_create_flags(const char *path, uint64_t size, int flags);
kv_pool *kv_pool_open_flags(const char *path, int flags);
/* Close the pool. The calling thread must have no open transaction: if it has one, the call
 * fails with KV_EINVAL and changes nothing (the pool and the transaction stay open).
 * Otherwise the pool is closed and `pop` is invalid, also when an error is returned (the pool
 * was then closed without a clean shutdown; the next open recovers it). A transaction open on
 * another thread violates the rule above: the call then waits for it to end. 0 or KV_E*. */
int kv_pool_close(kv_pool *pop);
/* The pool's id (what kv_oid.pool_id holds). */
uint64_t kv_pool_id(const kv_pool *pop);
/* The KV_CREATE_* flag of the pool's redundancy, 0 for none. */
int kv_pool_redundancy(const kv_pool *pop);

/* The root object: allocated zeroed on the first call, at least `size` bytes. A later call
 * with a larger size than the first fails with KV_EINVAL. Null oid on failure. The first call
 * commits the root in a transaction of its own, even inside the thread's transaction. */
kv_oid kv_root(kv_pool *pop, size_t size);

/* Address of `oid` in this process, or NULL for the null oid, an oid of another pool or an
 * offset outside the heap's data zone. No locks, no allocation. In a trapped pool the address
 * is in the staging range: pass it to the kv_* calls, never dereference it. */
void *kv_direct(const kv_pool *pop, kv_oid oid);
/* The oid of an address inside the pool's heap (the offset of that byte, not necessarily
 * the start of a block), or the null oid. */
kv_oid kv_oid_of(const kv_pool *pop, const void *addr);
/* Usable size of an allocated block (0 for the null oid or a bad one, and for now also for a
 * block allocated by a transaction that has not committed yet). */
size_t kv_usable_size(kv_pool *pop, kv_oid oid);

/* Transactions (per thread, flattened when nested). */
/* Begin a transaction, or a nested level of the open one. In an aborted transaction it
 * returns KV_EABORTED and opens no level. */
int kv_tx_begin(kv_pool *pop);
/* Begin a transaction in `mode` (KV_TX_UNDO or KV_TX_REDO; anything else is KV_EINVAL, which
 * inside a transaction aborts it). A nested level keeps the outer level's mode whatever `mode`
 * says. kv_tx_begin(pop) is kv_tx_begin_mode(pop, KV_TX_UNDO). */
int kv_tx_begin_mode(kv_pool *pop, int mode);
/* The mode of the calling thread's open transaction on `pop` (KV_TX_UNDO or KV_TX_REDO), or -1
 * if it has none. */
int kv_tx_mode(const kv_pool *pop);
/* Store `len` bytes from `src` at `dst`, an address of the pool's heap (from kv_direct, plus
 * an offset), in the calling thread's transaction: undo mode snapshots the range and stores,
 * redo mode logs the new bytes (applied at commit). The range must lie in the heap's data zone.
 * `src` may itself point into the pool (it is then read as the transaction sees it, and the
 * ranges may overlap). len 0: nothing. Outside a transaction: KV_ENOTX. */
int kv_tx_write(kv_pool *pop, void *dst, const void *src, size_t len);
/* Copy `len` bytes at `src`, an address of the pool's heap, to `dst` (ordinary memory, not in
 * the pool: KV_EINVAL), as the calling thread's transaction sees them (its own writes
 * included). Outside a transaction it reads the committed bytes. len 0: nothing. In a pool
 * with eager redundancy every line read outside the transaction's own changes is verified:
 * a line that fails its checksum in a page that fails its own is KV_EREFUSED, never served. */
int kv_tx_read(kv_pool *pop, void *dst, const void *src, size_t len);
/* Snapshot [oid.off + off, oid.off + off + len) before changing it (len 0: nothing). The
 * range must lie in the heap's data zone; a range added before, or inside a block allocated
 * in this transaction, needs no new snapshot and costs nothing. */
int kv_tx_add_range(kv_pool *pop, kv_oid oid, uint64_t off, size_t len);
/* Snapshot [ptr, ptr + len), an address range inside the pool. */
int kv_tx_add_direct(kv_pool *pop, void *ptr, size_t len);
/* Allocate `size` bytes (contents undefined / zeroed). Null oid on failure (tx aborted). */
kv_oid kv_tx_alloc(kv_pool *pop, size_t size);
kv_oid kv_tx_zalloc(kv_pool *pop, size_t size);
/* Allocate `size` bytes with `flags`: 0 is kv_tx_alloc; KV_ALLOC_RELIABLE makes a reliable
 * object of `size` logical bytes, all zero: each 8-byte word is stored beside an 8-byte check
 * word (the block is about twice `size` plus 32 bytes), checked on every kv_rtx_read, which
 * corrects up to 6 flipped bits per word (and most patterns of 7) and writes the correction
 * back with the transaction, and re-encoded by every kv_rtx_write. A word that cannot be
 * corrected is KV_EUNCORRECTABLE, never a wrong value. Reach a reliable object only through
 * kv_rtx_read / kv_rtx_write (its bytes in the pool are interleaved with check words); free
 * it with kv_tx_free. Unknown flags: KV_EINVAL. Null oid on failure (tx aborted). */
#define KV_ALLOC_RELIABLE 1
kv_oid kv_tx_alloc_flags(kv_pool *pop, size_t size, int flags);
/* Copy `len` logical bytes at byte `off` of reliable object `oid` to `dst` (ordinary memory),
 * in the calling thread's transaction (outside one: KV_ENOTX). A range past the object's end,
 * or an oid that is not a reliable object: KV_EINVAL / KV_ECORRUPT. */
int kv_rtx_read(kv_pool *pop, kv_oid oid, uint64_t off, void *dst, size_t len);
/* Store `len` bytes from `src` at logical byte `off` of reliable object `oid` in the calling
 * thread's transaction. A write covering part of a word reads that word first: if it cannot
 * be corrected, KV_EUNCORRECTABLE (a write of the whole word replaces it). */
int kv_rtx_write(kv_pool *pop, kv_oid oid, uint64_t off, const void *src, size_t len);
/* Free an allocated block at commit. Freeing the null oid does nothing. */
int kv_tx_free(kv_pool *pop, kv_oid oid);
/* Commit (outermost) or leave a nested level. 0, or the error that aborted the tx: in an
 * aborted transaction every level's kv_tx_commit returns the first error, and the outermost
 * one rolls back. After the outermost level the thread is out of the transaction. */
int kv_tx_commit(kv_pool *pop);
/* Abort the whole transaction now: every added range is rolled back before this returns
 * (outermost level) or at the outermost kv_tx_commit (nested). Either way it also leaves the
 * current level, as kv_tx_commit does (do not call both for one level): after an outermost
 * abort the thread is out of the transaction; after a nested one the enclosing levels
 * continue aborted, and their kv_tx_commit calls return `err` (KV_EABORTED if `err` is 0)
 * unless an earlier error aborted the transaction first. Without a transaction: no effect. */
void kv_tx_abort(kv_pool *pop, int err);
/* 1 if the calling thread is in a transaction of `pop`, else 0. */
int kv_tx_active(const kv_pool *pop);

/* A lock that lives in persistent memory and is reset when the pool is opened. It must lie
 * inside the pool's heap (in an allocated object); its bytes are never read or written (the
 * lock state is kept in DRAM, keyed by its offset). Not recursive: locking a mutex the thread
 * already holds never returns. Unlocking one the thread does not hold: KV_EINVAL. Locks are
 * independent of transactions: to publish a change made under a lock, commit before unlocking. */
typedef struct kv_mutex {
	uint64_t opaque[8];
} kv_mutex;
int kv_mutex_lock(kv_pool *pop, kv_mutex *m);
int kv_mutex_unlock(kv_pool *pop, kv_mutex *m);

/* Durability on demand (DNV Memory): from now on, redo (and isolated) commits on `pop` write in
 * place with no flush and no fence, and a save on SIGPWR makes them durable: it stops the
 * writers, saves the logs of commits caught in flight, writes back every line they dirtied and
 * marks the heap saved, within `window_ms` (33 is the usual forecast of a power supply; 1 is
 * ATX PWR_OK's). The process gets one save thread and one SIGPWR handler (chained to a previous
 * handler). After power is lost without a finished save, kv_pool_open fails with KV_ENOTSAVED
 * rather than open a heap that may hold part of a transaction. Threads beyond what the window
 * can save run their redo transactions in undo mode (kv_tx_mode says so). KV_EINVAL for a bad
 * window. kv_pool_close makes everything durable and turns it off. */
int kv_pool_on_demand(kv_pool *pop, double window_ms);
/* 1 if redo commits on `pop` are durable on demand, 0 if they flush at commit, -1 on error. */
int kv_pool_durability(const kv_pool *pop);

/* Text of the calling thread's last error ("" if none). Valid until the next kv_* call. */
const char *kv_errormsg(void);

#ifdef __cplusplus
}
#endif
#endif /* KAVACH_H */
