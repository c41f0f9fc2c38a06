/*
 * list.c: a persistent linked list (a stack of numbered strings) through kavach.h alone.
 *
 *   list POOL push N    create POOL if it does not exist, then push N items (one transaction
 *                       each)
 *   list POOL pop N     pop up to N items (one transaction each)
 *   list POOL print     print the list, top first
 *
 * Build: cc -I crates/heap-ffi/include list.c target/release/libkavach.a -lpthread -ldl -lm
 *
 * Every change happens in a transaction: snapshot what is about to change (kv_tx_add_range /
 * kv_tx_add_direct), then store to it directly. A block allocated in the same transaction needs
 * no snapshot. A crash at any point leaves the list as it was before or after the transaction.
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
	fprintf(stderr, "list: %s failed (%d): %s\n", what, err, kv_errormsg());
	return 1;
}

static int push(kv_pool *pop, kv_oid root_oid, struct root *root)
{
	int err = kv_tx_begin(pop);
	if (err)
		return fail("kv_tx_begin", err);
	kv_oid n = kv_tx_alloc(pop, sizeof(struct node));
	if (KV_OID_IS_NULL(n)) {
		err = kv_tx_commit(pop); /* rolls the aborted transaction back */
		return fail("kv_tx_alloc", err);
	}
	struct node *node = kv_direct(pop, n);
	node->next = root->head;
	node->seq = root->next_seq;
	snprintf(node->text, TEXT_MAX, "item %" PRIu64, root->next_seq);
	/* the whole root changes: one snapshot */
	err = kv_tx_add_range(pop, root_oid, 0, sizeof(struct root));
	if (!err) {
		root->head = n;
		root->count++;
		root->next_seq++;
	}
	int cerr = kv_tx_commit(pop);
	return err || cerr ? fail("push", err ? err : cerr) : 0;
}

static int pop_one(kv_pool *pop, struct root *root)
{
	if (KV_OID_IS_NULL(root->head))
		return 0;
	int err = kv_tx_begin(pop);
	if (err)
		return fail("kv_tx_begin", err);
	kv_oid top = root->head;
	struct node *node = kv_direct(pop, top);
	err = kv_tx_add_direct(pop, &root->head, sizeof(root->head));
	if (!err)
		err = kv_tx_add_direct(pop, &root->count, sizeof(root->count));
	if (!err) {
		root->head = node->next;
		root->count--;
		err = kv_tx_free(pop, top);
	}
	int cerr = kv_tx_commit(pop);
	return err || cerr ? fail("pop", err ? err : cerr) : 0;
}

static void print(kv_pool *pop, const struct root *root)
{
	printf("count %" PRIu64 ":", root->count);
	for (kv_oid at = root->head; !KV_OID_IS_NULL(at);) {
		const struct node *node = kv_direct(pop, at);
		printf(" [%s]", node->text);
		at = node->next;
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[2], "print") != 0 && argc != 4)) {
		fprintf(stderr, "usage: list POOL push N | list POOL pop N | list POOL print\n");
		return 2;
	}
	const char *path = argv[1];
	long n = argc == 4 ? strtol(argv[3], NULL, 10) : 0;
	kv_pool *pop;
	if (access(path, F_OK) == 0)
		pop = kv_pool_open(path);
	else
		pop = kv_pool_create(path, POOL_SIZE);
	if (!pop) {
		fprintf(stderr, "list: cannot open %s: %s\n", path, kv_errormsg());
		return 1;
	}
	kv_oid root_oid = kv_root(pop, sizeof(struct root));
	struct root *root = kv_direct(pop, root_oid);
	if (!root) {
		fprintf(stderr, "list: no root: %s\n", kv_errormsg());
		kv_pool_close(pop);
		return 1;
	}
	int rc = 0;
	if (strcmp(argv[2], "push") == 0) {
		for (long i = 0; i < n && rc == 0; i++)
			rc = push(pop, root_oid, root);
	} else if (strcmp(argv[2], "pop") == 0) {
		for (long i = 0; i < n && rc == 0; i++)
			rc = pop_one(pop, root);
	} else if (strcmp(argv[2], "print") != 0) {
		fprintf(stderr, "list: unknown command %s\n", argv[2]);
		rc = 2;
	}
	if (rc == 0)
		print(pop, root);
	int err = kv_pool_close(pop);
	if (err)
		return fail("kv_pool_close", err);
	return rc;
}
