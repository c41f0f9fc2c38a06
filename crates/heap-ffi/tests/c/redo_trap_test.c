/*
 * redo_trap_test.c: the C test of kavach.h's redo-mode calls (kv_tx_begin_mode, kv_tx_mode,
 * kv_tx_write, kv_tx_read) and of the usage trap (KV_OPEN_TRAP, KAVACH_TRAP=1), run by
 * tests/c_api.rs.
 *
 *   redo_trap_test DIR      makes its pools in DIR (which must exist and be empty)
 *
 * The trap is checked with child processes (fork): a child that loads or stores through an
 * address kv_direct gave for a trapped pool must die of SIGSEGV with the library's message on
 * its stderr (read back through a pipe); a child that faults elsewhere must die of SIGSEGV
 * without it (the handler passes faults that are not its own on).
 *
 * Prints "redo_trap_test: N checks, 0 failed" and exits 0 when every check holds; otherwise
 * prints each failed check and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

#define POOL_SIZE (64ull << 20)

struct root {
	uint64_t words[8];
	kv_oid block; /* allocated in a redo transaction */
	kv_mutex lock;
};

static char path_redo[4096], path_trap[4096], path_env[4096];

static uint64_t get(kv_pool *pop, const void *at)
{
	uint64_t v = 0xdeadbeef;
	int err = kv_tx_read(pop, &v, at, sizeof(v));
	CHECK_EQ(err, 0);
	return v;
}

static int put(kv_pool *pop, void *at, uint64_t v)
{
	return kv_tx_write(pop, at, &v, sizeof(v));
}

/* ---- redo-mode calls --------------------------------------------------------------------- */

static void test_modes(kv_pool *pop, struct root *root)
{
	/* outside a transaction */
	CHECK_EQ(kv_tx_mode(pop), -1);
	CHECK_EQ(put(pop, &root->words[0], 1), KV_ENOTX);
	CHECK(strstr(kv_errormsg(), "kv_tx_write") != NULL);
	CHECK_EQ(get(pop, &root->words[0]), 0);
	CHECK_EQ(kv_tx_begin_mode(pop, 7), KV_EINVAL);
	CHECK(strstr(kv_errormsg(), "KV_TX_REDO") != NULL);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(kv_tx_mode(NULL), -1);

	/* redo: the transaction sees its own writes; nested levels keep the outer mode */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	CHECK_EQ(kv_tx_mode(pop), KV_TX_REDO);
	CHECK_EQ(put(pop, &root->words[0], 11), 0);
	CHECK_EQ(get(pop, &root->words[0]), 11);
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_UNDO), 0);
	CHECK_EQ(kv_tx_mode(pop), KV_TX_REDO);
	CHECK_EQ(put(pop, &root->words[1], 12), 0);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(kv_tx_mode(pop), KV_TX_REDO);
	CHECK_EQ(get(pop, &root->words[1]), 12);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(kv_tx_mode(pop), -1);
	/* committed: visible outside, to loads too */
	CHECK_EQ(get(pop, &root->words[0]), 11);
	CHECK_EQ(root->words[1], 12);

	/* undo through kv_tx_write */
	CHECK_EQ(kv_tx_begin(pop), 0);
	CHECK_EQ(kv_tx_mode(pop), KV_TX_UNDO);
	CHECK_EQ(put(pop, &root->words[2], 13), 0);
	CHECK_EQ(get(pop, &root->words[2]), 13);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(root->words[2], 13);

	/* abort in either mode rolls back what kv_tx_write wrote */
	int modes[2] = {KV_TX_REDO, KV_TX_UNDO};
	for (int m = 0; m < 2; m++) {
		CHECK_EQ(kv_tx_begin_mode(pop, modes[m]), 0);
		CHECK_EQ(put(pop, &root->words[0], 99), 0);
		CHECK_EQ(put(pop, &root->words[3], 98), 0);
		CHECK_EQ(get(pop, &root->words[3]), 98);
		kv_tx_abort(pop, 0);
		CHECK_EQ(kv_tx_active(pop), 0);
		CHECK_EQ(get(pop, &root->words[0]), 11);
		CHECK_EQ(get(pop, &root->words[3]), 0);
	}

	/* a bad mode inside a transaction aborts it */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	CHECK_EQ(put(pop, &root->words[0], 77), 0);
	CHECK_EQ(kv_tx_begin_mode(pop, -3), KV_EINVAL);
	CHECK_EQ(put(pop, &root->words[0], 78), KV_EABORTED);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_active(pop), 0);
	CHECK_EQ(get(pop, &root->words[0]), 11);
}

static void test_write_read_errors(kv_pool *pop, struct root *root)
{
	uint64_t local[4] = {1, 2, 3, 4};

	/* a destination outside the pool aborts the transaction */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	CHECK_EQ(put(pop, &root->words[4], 5), 0);
	CHECK_EQ(kv_tx_write(pop, &local[0], &local[1], 8), KV_EINVAL);
	CHECK(strstr(kv_errormsg(), "not inside the pool") != NULL);
	CHECK_EQ(kv_tx_read(pop, &local[0], &root->words[0], 8), KV_EABORTED);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(get(pop, &root->words[4]), 0);

	/* reads: the source must be in the pool, the destination must not be */
	CHECK_EQ(kv_tx_read(pop, &local[0], &local[1], 8), KV_EINVAL);
	CHECK_EQ(kv_tx_read(pop, &root->words[5], &root->words[0], 8), KV_EINVAL);
	CHECK(strstr(kv_errormsg(), "kv_tx_write") != NULL);
	CHECK_EQ(kv_tx_read(pop, NULL, &root->words[0], 8), KV_EINVAL);
	CHECK_EQ(kv_tx_read(pop, &local[0], &root->words[0], 0), 0);
	CHECK_EQ(local[0], 1);
	/* a range running off the end of the heap */
	CHECK_EQ(kv_tx_read(pop, local, &root->words[0], (size_t)POOL_SIZE), KV_EINVAL);

	/* len 0 and a null source */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	CHECK_EQ(kv_tx_write(pop, &root->words[4], NULL, 0), 0);
	CHECK_EQ(kv_tx_write(pop, &root->words[4], NULL, 8), KV_EINVAL);
	CHECK_EQ(kv_tx_commit(pop), KV_EINVAL);
	CHECK_EQ(kv_tx_active(pop), 0);
}

static void test_alloc_and_copy(kv_pool *pop, struct root *root)
{
	/* a block allocated, filled and linked in one redo transaction */
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	kv_oid b = kv_tx_alloc(pop, 256);
	CHECK(!KV_OID_IS_NULL(b));
	uint64_t *blk = kv_direct(pop, b);
	CHECK(blk != NULL);
	for (uint64_t i = 0; i < 32; i++)
		CHECK_EQ(put(pop, &blk[i], 1000 + i), 0);
	CHECK_EQ(kv_tx_write(pop, &root->block, &b, sizeof(b)), 0);
	kv_oid seen;
	CHECK_EQ(kv_tx_read(pop, &seen, &root->block, sizeof(seen)), 0);
	CHECK(seen.off == b.off && seen.pool_id == b.pool_id);
	CHECK_EQ(get(pop, &blk[31]), 1031);
	/* a copy inside the pool, overlapping (memmove semantics), sees the transaction's writes */
	CHECK_EQ(kv_tx_write(pop, &blk[1], &blk[0], 8 * 8), 0);
	CHECK_EQ(get(pop, &blk[1]), 1000);
	CHECK_EQ(get(pop, &blk[8]), 1007);
	CHECK_EQ(get(pop, &blk[9]), 1009);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(root->block.off, b.off);
	CHECK_EQ(blk[0], 1000);
	CHECK_EQ(blk[1], 1000);
	CHECK_EQ(blk[8], 1007);
	CHECK_EQ(blk[31], 1031);
}

/* ---- the trap ---------------------------------------------------------------------------- */

enum child_action { LOAD, STORE, NULL_LOAD, API_ONLY };

/*
 * Run `action` on `addr` in a child process; return its wait status and put what it wrote to
 * stderr in `err` (NUL-terminated).
 */
static int in_child(enum child_action action, void *addr, char *err, size_t errlen)
{
	int fds[2];
	if (pipe(fds) != 0) {
		perror("pipe");
		exit(2);
	}
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		close(fds[0]);
		dup2(fds[1], 2);
		volatile uint64_t *p = addr;
		switch (action) {
		case LOAD:
			_exit((int)(*p & 0x7f));
		case STORE:
			*p = 42;
			_exit(0);
		case NULL_LOAD:
			p = NULL;
			_exit((int)(*(volatile uint64_t *)((uintptr_t)p + 8) & 0x7f));
		case API_ONLY:
			_exit(0);
		}
		_exit(3);
	}
	close(fds[1]);
	size_t got = 0;
	ssize_t n;
	while (got + 1 < errlen && (n = read(fds[0], err + got, errlen - 1 - got)) > 0)
		got += (size_t)n;
	err[got] = 0;
	close(fds[0]);
	int status = 0;
	waitpid(pid, &status, 0);
	return status;
}

static int died_of_segv(int status)
{
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

static int names_the_rule(const char *err)
{
	return strstr(err, "kavach: load or store at 0x") != NULL &&
	       strstr(err, "KV_OPEN_TRAP") != NULL && strstr(err, "kv_tx_read") != NULL &&
	       strstr(err, "kv_tx_write") != NULL;
}

static void test_trap(void)
{
	char err[4096];
	CHECK(kv_pool_create_flags(path_trap, POOL_SIZE, 1 << 5) == NULL);
	CHECK(strstr(kv_errormsg(), "unknown pool flags") != NULL);
	CHECK(access(path_trap, F_OK) != 0);

	kv_pool *pop = kv_pool_create_flags(path_trap, POOL_SIZE, KV_OPEN_TRAP);
	CHECK(pop != NULL);
	if (!pop)
		return;
	kv_oid r = kv_root(pop, sizeof(struct root));
	CHECK(!KV_OID_IS_NULL(r));
	struct root *root = kv_direct(pop, r); /* staged: never dereferenced below */
	CHECK(root != NULL);
	CHECK(kv_oid_of(pop, root).off == r.off);
	CHECK(kv_oid_of(pop, &root->words[3]).off == r.off + 3 * 8);

	/* the API works through staged addresses, in both modes */
	CHECK_EQ(get(pop, &root->words[0]), 0);
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	for (uint64_t i = 0; i < 8; i++)
		CHECK_EQ(put(pop, &root->words[i], 500 + i), 0);
	CHECK_EQ(get(pop, &root->words[7]), 507);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(kv_tx_begin(pop), 0);
	CHECK_EQ(kv_tx_add_direct(pop, &root->words[6], 8), 0);
	CHECK_EQ(kv_tx_add_range(pop, r, 0, 8), 0);
	CHECK_EQ(put(pop, &root->words[6], 606), 0);
	CHECK_EQ(kv_tx_commit(pop), 0);
	CHECK_EQ(kv_mutex_lock(pop, &root->lock), 0);
	CHECK_EQ(kv_mutex_unlock(pop, &root->lock), 0);
	CHECK_EQ(get(pop, &root->words[6]), 606);

	/* a load and a store through a staged address die at once, naming the rule */
	int st = in_child(LOAD, &root->words[1], err, sizeof(err));
	CHECK(died_of_segv(st));
	CHECK(names_the_rule(err));
	if (!names_the_rule(err))
		fprintf(stderr, "child's stderr: \"%s\"\n", err);
	st = in_child(STORE, &root->words[2], err, sizeof(err));
	CHECK(died_of_segv(st));
	CHECK(names_the_rule(err));
	/* the store did not happen */
	CHECK_EQ(get(pop, &root->words[2]), 502);
	/* a fault elsewhere is not the trap's: SIGSEGV, no message */
	st = in_child(NULL_LOAD, NULL, err, sizeof(err));
	CHECK(died_of_segv(st));
	CHECK(strstr(err, "kavach") == NULL);
	/* and a child that follows the rules exits normally */
	st = in_child(API_ONLY, &root->words[1], err, sizeof(err));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);

	CHECK_EQ(kv_pool_close(pop), 0);

	/* the data is there after reopening, without the trap (plain loads) and with it */
	pop = kv_pool_open(path_trap);
	CHECK(pop != NULL);
	if (!pop)
		return;
	struct root *plain = kv_direct(pop, kv_root(pop, sizeof(struct root)));
	CHECK(plain != NULL);
	if (plain) {
		CHECK_EQ(plain->words[0], 500);
		CHECK_EQ(plain->words[2], 502);
		CHECK_EQ(plain->words[6], 606);
		CHECK_EQ(plain->words[7], 507);
	}
	st = in_child(LOAD, &plain->words[0], err, sizeof(err));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 500 % 128);
	CHECK_EQ(kv_pool_close(pop), 0);

	pop = kv_pool_open_flags(path_trap, KV_OPEN_TRAP);
	CHECK(pop != NULL);
	if (!pop)
		return;
	root = kv_direct(pop, kv_root(pop, sizeof(struct root)));
	CHECK_EQ(get(pop, &root->words[0]), 500);
	CHECK_EQ(get(pop, &root->words[7]), 507);
	st = in_child(LOAD, &root->words[0], err, sizeof(err));
	CHECK(died_of_segv(st));
	CHECK(names_the_rule(err));
	CHECK_EQ(kv_pool_close(pop), 0);
}

/* KAVACH_TRAP=1 traps every pool the process opens or creates. */
static void test_env(void)
{
	char err[4096];
	CHECK(setenv("KAVACH_TRAP", "1", 1) == 0);
	kv_pool *pop = kv_pool_create(path_env, POOL_SIZE);
	CHECK(pop != NULL);
	if (!pop)
		return;
	struct root *root = kv_direct(pop, kv_root(pop, sizeof(struct root)));
	CHECK(root != NULL);
	CHECK_EQ(kv_tx_begin_mode(pop, KV_TX_REDO), 0);
	CHECK_EQ(put(pop, &root->words[0], 31), 0);
	CHECK_EQ(kv_tx_commit(pop), 0);
	int st = in_child(LOAD, &root->words[0], err, sizeof(err));
	CHECK(died_of_segv(st));
	CHECK(names_the_rule(err));
	CHECK_EQ(kv_pool_close(pop), 0);
	CHECK(unsetenv("KAVACH_TRAP") == 0);

	pop = kv_pool_open(path_env);
	CHECK(pop != NULL);
	if (!pop)
		return;
	root = kv_direct(pop, kv_root(pop, sizeof(struct root)));
	CHECK_EQ(root->words[0], 31);
	CHECK_EQ(kv_pool_close(pop), 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: redo_trap_test DIR\n");
		return 2;
	}
	snprintf(path_redo, sizeof(path_redo), "%s/redo.pool", argv[1]);
	snprintf(path_trap, sizeof(path_trap), "%s/trap.pool", argv[1]);
	snprintf(path_env, sizeof(path_env), "%s/env.pool", argv[1]);

	kv_pool *pop = kv_pool_create(path_redo, POOL_SIZE);
	if (!pop) {
		fprintf(stderr, "kv_pool_create %s: %s\n", path_redo, kv_errormsg());
		return 1;
	}
	kv_oid r = kv_root(pop, sizeof(struct root));
	struct root *root = kv_direct(pop, r);
	if (!root) {
		fprintf(stderr, "kv_root: %s\n", kv_errormsg());
		return 1;
	}
	test_modes(pop, root);
	test_write_read_errors(pop, root);
	test_alloc_and_copy(pop, root);
	CHECK_EQ(kv_pool_close(pop), 0);
	/* after reopening, the committed redo writes are there */
	pop = kv_pool_open(path_redo);
	CHECK(pop != NULL);
	if (pop) {
		root = kv_direct(pop, kv_root(pop, sizeof(struct root)));
		CHECK_EQ(root->words[0], 11);
		CHECK_EQ(root->words[1], 12);
		CHECK_EQ(root->words[2], 13);
		CHECK_EQ(root->words[3], 0);
		uint64_t *blk = kv_direct(pop, root->block);
		CHECK(blk != NULL);
		if (blk)
			CHECK_EQ(blk[31], 1031);
		CHECK_EQ(kv_pool_close(pop), 0);
	}

	test_trap();
	test_env();

	printf("redo_trap_test: %d checks, %d failed\n", checks, failed);
	return failed == 0 ? 0 : 1;
}
