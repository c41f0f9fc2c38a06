/*
 * redo_list.c: list.c (a persistent stack of numbered strings, the same pool layout and output)
 * written to the redo-mode rules, on a pool opened with the usage trap.
 *
 *   redo_list POOL push N | redo_list POOL pop N | redo_list POOL print
 *
 * Build: cc -I crates/heap-ffi/include redo_list.c target/release/libkavach.a -lpthread -ldl -lm
 *
 * Transactions are begun with kv_tx_begin_mode(pop, KV_TX_REDO); persistent memory is written
 * only with kv_tx_write and read only with kv_tx_read (which also sees the transaction's own
 * writes), never through a pointer. The pool is opened with KV_OPEN_TRAP, so the addresses
 * kv_direct returns are in a no-access range: a load or store through one would kill the
 * program at once with a message naming the rule. kv_direct still does the arithmetic
 * (&node->next of a node's address is the address of its next field).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kavach.h"

#define POOL_SIZE (64ull << 20)
#define TEXT_MAX 48

struct node {
	kv_oid next;
	uint64_t seq;
	char text[TEXT_MAX];
};

struct root {
	kv_oid head;
	uint64_t count;    /* items in the list */
	uint64_t next_seq; /* number of the next item pushed */
};

static int fail(const char *what, int err)
{
	fprintf(stderr, "redo_list: %s failed (%d): %s\n", what, err, kv_errormsg());
	return 1;
}

static int push(kv_pool *pop, struct root *root)
{
	int err = kv_tx_begin_mode(pop, KV_TX_REDO);
	if (err)
		return fail("kv_tx_begin_mode", err);
	struct root r;
	struct node node;
	kv_oid n = kv_tx_alloc(pop, sizeof(struct node));
	err = KV_OID_IS_NULL(n) ? KV_ENOMEM : kv_tx_read(pop, &r, root, sizeof(r));
	if (!err) {
		memset(&node, 0, sizeof(node));
		node.next = r.head;
		node.seq = r.next_seq;
		snprintf(node.text, TEXT_MAX, "item %" PRIu64, r.next_seq);
		err = kv_tx_write(pop, kv_direct(pop, n), &node, sizeof(node));
	}
	if (!err) {
		r.head = n;
		r.count++;
		r.next_seq++;
		err = kv_tx_write(pop, root, &r, sizeof(r));
	}
	int cerr = kv_tx_commit(pop); /* rolls an aborted transaction back */
	return err || cerr ? fail("push", err ? err : cerr) : 0;
}

static int pop_one(kv_pool *pop, struct root *root)
{
	int err = kv_tx_begin_mode(pop, KV_TX_REDO);
	if (err)
		return fail("kv_tx_begin_mode", err);
	struct root r;
	err = kv_tx_read(pop, &r, root, sizeof(r));
	if (!err && !KV_OID_IS_NULL(r.head)) {
		kv_oid top = r.head;
		struct node *node = kv_direct(pop, top);
		err = kv_tx_read(pop, &r.head, &node->next, sizeof(r.head));
		r.count--;
		if (!err)
			err = kv_tx_write(pop, root, &r, sizeof(r));
		if (!err)
			err = kv_tx_free(pop, top);
	}
	int cerr = kv_tx_commit(pop);
	return err || cerr ? fail("pop", err ? err : cerr) : 0;
}

static int print(kv_pool *pop, struct root *root)
{
	struct root r;
	int err = kv_tx_read(pop, &r, root, sizeof(r)); /* outside a transaction: committed bytes */
	if (err)
		return fail("kv_tx_read(root)", err);
	printf("count %" PRIu64 ":", r.count);
	for (kv_oid at = r.head; !KV_OID_IS_NULL(at);) {
		struct node node;
		if ((err = kv_tx_read(pop, &node, kv_direct(pop, at), sizeof(node))) != 0)
			return fail("kv_tx_read(node)", err);
		node.text[TEXT_MAX - 1] = 0;
		printf(" [%s]", node.text);
		at = node.next;
	}
	printf("\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "print") != 0 && argc != 4)) {
		fprintf(stderr, "usage: redo_list POOL push N | redo_list POOL pop N | redo_list POOL print\n");
		return 2;
	}
	const char *path = argv[1];
	long n = argc == 4 ? strtol(argv[3], NULL, 10) : 0;
	kv_pool *pop;
	if (access(path, F_OK) == 0)
		pop = kv_pool_open_flags(path, KV_OPEN_TRAP);
	else
		pop = kv_pool_create_flags(path, POOL_SIZE, KV_OPEN_TRAP);
	if (!pop) {
		fprintf(stderr, "redo_list: cannot open %s: %s\n", path, kv_errormsg());
		return 1;
	}
	struct root *root = kv_direct(pop, kv_root(pop, sizeof(struct root)));
	if (!root) {
		fprintf(stderr, "redo_list: no root: %s\n", kv_errormsg());
		kv_pool_close(pop);
		return 1;
	}
	int rc = 0;
	if (strcmp(argv[2], "push") == 0) {
		for (long i = 0; i < n && rc == 0; i++)
			rc = push(pop, root);
	} else if (strcmp(argv[2], "pop") == 0) {
		for (long i = 0; i < n && rc == 0; i++)
			rc = pop_one(pop, root);
	} else if (strcmp(argv[2], "print") != 0) {
		fprintf(stderr, "redo_list: unknown command %s\n", argv[2]);
		rc = 2;
	}
	if (rc == 0)
		rc = print(pop, root);
	int err = kv_pool_close(pop);
	if (err)
		return fail("kv_pool_close", err);
	return rc;
}
