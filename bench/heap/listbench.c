/*
 * listbench.c: the transactional circular doubly-linked list of the DNV Memory paper (SYSTOR
 * '18, section 5, figures 5-8), compiled once per backend (see pm.h: pmemobj, kavach (undo),
 * kavach-redo).
 *
 *   listbench --elements N [--ops M] [--visits V] [--payload B] [--dir DIR] [--pool-mib P]
 *
 * A node is {next oid, prev oid, B bytes of payload in 8-byte words} (default B = 128); the
 * root holds the head oid and the element count; head->prev is the tail. Every transaction is
 * begun in the build's mode (pm_tx_begin_mode(pop, PM_TX_MODE)) and reads and writes
 * persistent memory only with pm_read / pm_write / pm_write_fresh, so that the redo build is a
 * correct redo-mode program (pmemobj and kavach: loads, add_range + store; see pm.h).
 *
 * One process, one fresh pool, one list:
 *   1. build: N push_backs (untimed);
 *   2. iterate_read: one transaction walks the whole list and reads 8 bytes (payload word 0)
 *      of every element; 1 warm-up, then R = max(1, V / N) timed transactions (V default
 *      1,000,000 element visits);
 *   3. iterate_write: one transaction walks the list and writes 8 bytes (payload word 0 + 1) of
 *      every element; 1 warm-up + R timed. A transaction the library refuses as too large
 *      (undo log full) is reported as {"error": ...} and the op stops there;
 *   4. push_back: M transactions (default 100,000), each allocates a node, fills it and links it
 *      at the tail (the list grows from N to N + M);
 *   5. pop_front: M transactions, each unlinks the head and frees it (back to N).
 * Then, untimed: the list is checked (count, every next/prev link, FIFO order of the node ids,
 * every payload word, the sums the iterate_read transactions returned), the pool is closed and
 * reopened, and the list is checked again. Any failure: exit 1.
 *
 * Output: one JSON line per op on stdout ("ns_per_op" is per transaction; iterate ops also
 * give "ns_per_element").
 */
#include "util.h"

struct node {
	pm_oid next;
	pm_oid prev;
	uint64_t payload[]; /* word 0: changed by iterate_write; word 1: the node's id */
};

struct list_root {
	pm_oid head;
	uint64_t count;
};

static pm_pool *pop;
static uint64_t payload_words;
static size_t node_size;

/* The value of payload word k (k >= 2) of node `id`. */
static inline uint64_t pattern(uint64_t id, uint64_t k)
{
	return mix64(id * 64 + k);
}

static inline struct node *nd(pm_oid o)
{
	return pm_direct(pop, o);
}

/* A call in a transaction failed: end the transaction and stop, with the library's message. */
__attribute__((noreturn)) static void tx_fail(const char *what, int err)
{
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s", pm_errormsg());
	(void)pm_tx_commit(pop);
	die("%s failed: error %d: %s", what, err, msg);
}

#define TRY(call, what)                                                                      \
	do {                                                                                 \
		int e_ = (call);                                                             \
		if (e_ != 0)                                                                 \
			tx_fail((what), e_);                                                 \
	} while (0)

static void begin(void)
{
	int err = pm_tx_begin_mode(pop, PM_TX_MODE);
	if (err != 0)
		die_pm("pm_tx_begin_mode", err);
}

static void commit(const char *what)
{
	int err = pm_tx_commit(pop);
	if (err != 0)
		die_pm(what, err);
}

/* ---- the four operations ------------------------------------------------------------------ */

/* Allocate node `id`, fill it and link it at the tail; `img` is a DRAM buffer of node_size. */
static void push_back(struct list_root *r, uint64_t id, struct node *img)
{
	begin();
	pm_oid b = pm_tx_alloc(pop, node_size);
	if (PM_OID_IS_NULL(b))
		tx_fail("pm_tx_alloc(node)", -1);
	img->payload[0] = id;
	img->payload[1] = id;
	for (uint64_t k = 2; k < payload_words; k++)
		img->payload[k] = pattern(id, k);
	pm_oid head;
	uint64_t count;
	TRY(pm_read(pop, &head, &r->head, sizeof(head)), "pm_read(head)");
	TRY(pm_read(pop, &count, &r->count, sizeof(count)), "pm_read(count)");
	if (PM_OID_IS_NULL(head)) {
		img->next = b;
		img->prev = b;
		TRY(pm_write_fresh(pop, nd(b), img, node_size), "pm_write_fresh(node)");
		TRY(pm_write(pop, &r->head, &b, sizeof(b)), "pm_write(head)");
	} else {
		pm_oid tail;
		TRY(pm_read(pop, &tail, &nd(head)->prev, sizeof(tail)), "pm_read(head->prev)");
		img->next = head;
		img->prev = tail;
		TRY(pm_write_fresh(pop, nd(b), img, node_size), "pm_write_fresh(node)");
		TRY(pm_write(pop, &nd(tail)->next, &b, sizeof(b)), "pm_write(tail->next)");
		TRY(pm_write(pop, &nd(head)->prev, &b, sizeof(b)), "pm_write(head->prev)");
	}
	count++;
	TRY(pm_write(pop, &r->count, &count, sizeof(count)), "pm_write(count)");
	commit("pm_tx_commit(push_back)");
}

/* Unlink the head and free it; returns its id. */
static uint64_t pop_front(struct list_root *r)
{
	begin();
	pm_oid head;
	uint64_t count, id;
	TRY(pm_read(pop, &head, &r->head, sizeof(head)), "pm_read(head)");
	TRY(pm_read(pop, &count, &r->count, sizeof(count)), "pm_read(count)");
	if (PM_OID_IS_NULL(head) || count == 0)
		tx_fail("pop_front of an empty list", -1);
	TRY(pm_read(pop, &id, &nd(head)->payload[1], sizeof(id)), "pm_read(id)");
	if (count == 1) {
		pm_oid null = PM_OID_NULL;
		TRY(pm_write(pop, &r->head, &null, sizeof(null)), "pm_write(head)");
	} else {
		pm_oid next, tail;
		TRY(pm_read(pop, &next, &nd(head)->next, sizeof(next)), "pm_read(head->next)");
		TRY(pm_read(pop, &tail, &nd(head)->prev, sizeof(tail)), "pm_read(head->prev)");
		TRY(pm_write(pop, &nd(tail)->next, &next, sizeof(next)), "pm_write(tail->next)");
		TRY(pm_write(pop, &nd(next)->prev, &tail, sizeof(tail)), "pm_write(next->prev)");
		TRY(pm_write(pop, &r->head, &next, sizeof(next)), "pm_write(head)");
	}
	count--;
	TRY(pm_write(pop, &r->count, &count, sizeof(count)), "pm_write(count)");
	TRY(pm_tx_free(pop, head), "pm_tx_free(node)");
	commit("pm_tx_commit(pop_front)");
	return id;
}

/* One transaction: the sum of payload word 0 over the list. */
static uint64_t iterate_read(struct list_root *r)
{
	begin();
	pm_oid cur;
	uint64_t count, sum = 0;
	TRY(pm_read(pop, &cur, &r->head, sizeof(cur)), "pm_read(head)");
	TRY(pm_read(pop, &count, &r->count, sizeof(count)), "pm_read(count)");
	for (uint64_t i = 0; i < count; i++) {
		struct node *n = nd(cur);
		uint64_t v;
		TRY(pm_read(pop, &v, &n->payload[0], sizeof(v)), "pm_read(payload)");
		sum += v;
		TRY(pm_read(pop, &cur, &n->next, sizeof(cur)), "pm_read(next)");
	}
	commit("pm_tx_commit(iterate_read)");
	return sum;
}

/* One transaction: payload word 0 += 1 on every element. 0, or the error that aborted it. */
static int iterate_write(struct list_root *r, char *msg, size_t msglen)
{
	begin();
	pm_oid cur;
	uint64_t count;
	TRY(pm_read(pop, &cur, &r->head, sizeof(cur)), "pm_read(head)");
	TRY(pm_read(pop, &count, &r->count, sizeof(count)), "pm_read(count)");
	for (uint64_t i = 0; i < count; i++) {
		struct node *n = nd(cur);
		uint64_t v;
		TRY(pm_read(pop, &v, &n->payload[0], sizeof(v)), "pm_read(payload)");
		v++;
		int err = pm_write(pop, &n->payload[0], &v, sizeof(v));
		if (err != 0) {
			/* A log that cannot hold the transaction: report it, not a failure. */
			snprintf(msg, msglen, "element %" PRIu64 " of %" PRIu64 ": error %d: %s", i,
				 count, err, pm_errormsg());
			(void)pm_tx_commit(pop);
			return err;
		}
		TRY(pm_read(pop, &cur, &n->next, sizeof(cur)), "pm_read(next)");
	}
	commit("pm_tx_commit(iterate_write)");
	return 0;
}

/* ---- check --------------------------------------------------------------------------------- */

/*
 * The list holds `count` nodes with ids first, first + 1, ... in order; word 0 of node id is
 * id + bumps if id < bumped_below, else id. Read outside transactions (committed bytes).
 */
static void check_list(struct list_root *r, uint64_t count, uint64_t first, uint64_t bumped_below,
		       uint64_t bumps, const char *when)
{
	pm_oid head, cur;
	uint64_t c;
	if (pm_read(pop, &head, &r->head, sizeof(head)) || pm_read(pop, &c, &r->count, sizeof(c)))
		die_pm("pm_read(root)", -1);
	if (c != count)
		die("%s: the root counts %" PRIu64 " elements, expected %" PRIu64, when, c, count);
	if (count == 0) {
		if (!PM_OID_IS_NULL(head))
			die("%s: an empty list has a head", when);
		return;
	}
	cur = head;
	pm_oid prev_expected;
	if (pm_read(pop, &prev_expected, &nd(head)->prev, sizeof(prev_expected)))
		die_pm("pm_read", -1);
	uint64_t *w = malloc(node_size);
	if (!w)
		die("out of memory");
	for (uint64_t i = 0; i < count; i++) {
		struct node *n = nd(cur);
		if (n == NULL)
			die("%s: element %" PRIu64 " does not translate", when, i);
		if (pm_read(pop, w, n, node_size))
			die_pm("pm_read(node)", -1);
		pm_oid next = ((struct node *)w)->next, prev = ((struct node *)w)->prev;
		const uint64_t *pl = ((struct node *)w)->payload;
		uint64_t id = first + i;
		if (!PM_OID_EQ(prev, prev_expected))
			die("%s: element %" PRIu64 ": prev is not the element before it", when, i);
		if (pl[1] != id)
			die("%s: element %" PRIu64 " has id %" PRIu64 ", expected %" PRIu64, when, i, pl[1],
			    id);
		uint64_t want0 = id + (id < bumped_below ? bumps : 0);
		if (pl[0] != want0)
			die("%s: element %" PRIu64 ": word 0 is %" PRIu64 ", expected %" PRIu64, when, i,
			    pl[0], want0);
		for (uint64_t k = 2; k < payload_words; k++)
			if (pl[k] != pattern(id, k))
				die("%s: element %" PRIu64 ": payload word %" PRIu64 " is wrong", when, i, k);
		prev_expected = cur;
		cur = next;
	}
	if (!PM_OID_EQ(cur, head))
		die("%s: the last element's next is not the head", when);
	free(w);
}

/* ---- main ---------------------------------------------------------------------------------- */

static void report(const char *op, uint64_t elements, uint64_t n, uint64_t ns, uint64_t visited)
{
	double per = (double)ns / (double)n;
	printf("{\"bench\":\"list\",\"backend\":\"%s\",\"op\":\"%s\",\"elements\":%" PRIu64
	       ",\"payload\":%" PRIu64 ",\"n\":%" PRIu64 ",\"total_s\":%.6f,\"ns_per_op\":%.1f,"
	       "\"ops_per_s\":%.1f",
	       PM_BACKEND, op, elements, payload_words * 8, n, (double)ns / 1e9, per, 1e9 / per);
	if (visited)
		printf(",\"ns_per_element\":%.2f", (double)ns / (double)visited);
	printf("}\n");
	fflush(stdout);
	fprintf(stderr, "[%s] list %-13s N=%-7" PRIu64 " %10.1f ns/tx (n=%" PRIu64 ")\n", PM_BACKEND,
		op, elements, per, n);
}

static void report_error(const char *op, uint64_t elements, const char *msg)
{
	printf("{\"bench\":\"list\",\"backend\":\"%s\",\"op\":\"%s\",\"elements\":%" PRIu64
	       ",\"payload\":%" PRIu64 ",\"error\":\"",
	       PM_BACKEND, op, elements, payload_words * 8);
	for (const char *c = msg; *c; c++)
		if (*c == '"' || *c == '\\')
			printf("\\%c", *c);
		else if ((unsigned char)*c >= 0x20)
			putchar(*c);
	printf("\"}\n");
	fflush(stdout);
	fprintf(stderr, "[%s] list %-13s N=%-7" PRIu64 " not run to the end: %s\n", PM_BACKEND, op,
		elements, msg);
}

static void usage(void)
{
	fprintf(stderr, "usage: listbench --elements N [--ops M] [--visits V] [--payload B]\n"
			"                 [--dir DIR] [--pool-mib P]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dir = "/dev/shm";
	uint64_t elements = 0, ops = 100000, visits = 1000000, payload = 128, pool_mib = 0;
	int have_n = 0;
	if (argc % 2 == 0)
		usage();
	for (int i = 1; i + 1 < argc; i += 2) {
		const char *a = argv[i], *v = argv[i + 1];
		if (!strcmp(a, "--elements")) {
			elements = parse_u64(a, v);
			have_n = 1;
		} else if (!strcmp(a, "--ops"))
			ops = parse_u64(a, v);
		else if (!strcmp(a, "--visits"))
			visits = parse_u64(a, v);
		else if (!strcmp(a, "--payload"))
			payload = parse_u64(a, v);
		else if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--pool-mib"))
			pool_mib = parse_u64(a, v);
		else
			usage();
	}
	if (!have_n || elements == 0 || ops == 0 || visits == 0)
		usage();
	if (payload < 16 || payload % 8 != 0 || payload > 65536)
		die("--payload must be a multiple of 8 between 16 and 65536 (got %" PRIu64 ")", payload);
	payload_words = payload / 8;
	node_size = sizeof(struct node) + payload;
	if (pool_mib == 0)
		pool_mib = 256 + ((elements + ops) * (node_size + 128)) / (1 << 20);

	char path[4096];
	snprintf(path, sizeof(path), "%s/listbench-%s-%d.pool", dir, PM_BACKEND, (int)getpid());
	unlink(path);
	pop = pm_pool_create(path, pool_mib << 20);
	if (pop == NULL)
		die_pm("pm_pool_create", -1);
	pm_oid root = pm_root(pop, sizeof(struct list_root));
	if (PM_OID_IS_NULL(root))
		die_pm("pm_root", -1);
	struct list_root *r = pm_direct(pop, root);
	struct node *img = calloc(1, node_size);
	if (!img)
		die("out of memory");

	/* 1. build */
	uint64_t next_id = 0;
	for (uint64_t i = 0; i < elements; i++)
		push_back(r, next_id++, img);
	check_list(r, elements, 0, 0, 0, "after build");

	/* 2. iterate_read */
	uint64_t reps = visits / elements > 0 ? visits / elements : 1;
	uint64_t want_sum = elements * (elements - 1) / 2;
	if (iterate_read(r) != want_sum)
		die("iterate_read: wrong sum");
	uint64_t t0 = now_ns();
	uint64_t sums = 0;
	for (uint64_t i = 0; i < reps; i++)
		sums += iterate_read(r);
	uint64_t t1 = now_ns();
	if (sums != want_sum * reps)
		die("iterate_read: the sums of the timed transactions are wrong");
	report("iterate_read", elements, reps, t1 - t0, reps * elements);

	/* 3. iterate_write */
	char msg[1024];
	uint64_t bumps = 0;
	int err = iterate_write(r, msg, sizeof(msg));
	if (err == 0) {
		bumps++;
		uint64_t done = 0;
		t0 = now_ns();
		for (; done < reps; done++) {
			if ((err = iterate_write(r, msg, sizeof(msg))) != 0)
				break;
			bumps++;
		}
		t1 = now_ns();
		if (err == 0)
			report("iterate_write", elements, reps, t1 - t0, reps * elements);
	}
	if (err != 0)
		report_error("iterate_write", elements, msg);
	check_list(r, elements, 0, elements, bumps, "after iterate_write");

	/* 4. push_back, 5. pop_front */
	t0 = now_ns();
	for (uint64_t i = 0; i < ops; i++)
		push_back(r, next_id++, img);
	t1 = now_ns();
	report("push_back", elements, ops, t1 - t0, 0);
	uint64_t t2 = now_ns();
	for (uint64_t i = 0; i < ops; i++) {
		uint64_t id = pop_front(r);
		if (id != i)
			die("pop_front %" PRIu64 " returned node %" PRIu64, i, id);
	}
	uint64_t t3 = now_ns();
	report("pop_front", elements, ops, t3 - t2, 0);

	check_list(r, elements, ops, elements, bumps, "after push_back and pop_front");
	if ((err = pm_pool_close(pop)) != 0)
		die_pm("pm_pool_close", err);
	pop = pm_pool_open(path);
	if (pop == NULL)
		die_pm("pm_pool_open", -1);
	r = pm_direct(pop, pm_root(pop, sizeof(struct list_root)));
	check_list(r, elements, ops, elements, bumps, "after reopening");
	free(img);
	if ((err = pm_pool_close(pop)) != 0)
		die_pm("pm_pool_close", err);
	unlink(path);
	return 0;
}
