/*
 * fofbench: the two workloads of the WSP paper (Narayanan and Hodson, ASPLOS 2012, section 5)
 * on one configuration chosen at compile time (fof.h):
 *
 *   --workload hash  a chained hash table (2^17 buckets, 24-byte entries) prepopulated with
 *                    --entries keys (default 100,000; untimed, one transaction per insert),
 *                    then --ops random operations (default 1,000,000), each a lookup of a
 *                    present key or, with probability --update-pct %, an update; updates
 *                    alternate between inserting a new key and deleting a random present key,
 *                    so inserts = deletes and the table keeps its size. Each update is one
 *                    transaction (insert: allocate + fill the entry, link it at the bucket
 *                    head, count + 1; delete: unlink, free, count - 1). Lookups run outside
 *                    transactions, or with --lookup-tx each in a transaction of its own (begin
 *                    in the build's mode, walk the chain, commit), the per-operation
 *                    transaction context of the paper's FoC+UL heap.
 *   --workload avl   an AVL tree: insert --inserts random keys (default 100,000) into an empty
 *                    tree, one transaction per insert (descend, allocate + fill the node, link
 *                    it, fix heights back up the path, at most one single or double rotation).
 *
 * Time: one CLOCK_MONOTONIC read before and after the timed loop; reported as ns per
 * operation. The key and operation streams depend only on --seed, so every configuration does
 * exactly the same work, and the printed checksum (the sum of the values found by lookups and
 * the count of keys) must agree between configurations in a round.
 *
 * After the timed phase, untimed: a full check of the structure (hash: every entry in its
 * bucket, walk count = header count = expected, every present key found with its value, the
 * last 1,024 deleted keys absent; AVL: in-order keys strictly increasing, every height right,
 * every balance within 1, count, every key found), then for the persistent configurations a
 * pool close + open and the same check again. A failed check ends the process with exit 1.
 *
 * Output: one JSON line on stdout.
 */
#include "fof.h"

#include <unistd.h>

/* ---- hash table ---------------------------------------------------------------------------- */

#define HT_LOG 17
#define HT_BUCKETS (1u << HT_LOG)

struct ht_hdr {
	uint64_t magic;
	uint64_t count;
	uint64_t buckets; /* ref of uint64_t[HT_BUCKETS] */
	uint64_t pad[5];
};

struct ht_entry {
	uint64_t key;
	uint64_t value;
	uint64_t next;
};

struct ht_slot {
	uint64_t ref;
};

static inline uint64_t ht_bucket(uint64_t key)
{
	return (key * 0x9e3779b97f4a7c15ull) >> (64 - HT_LOG);
}

static struct ht_hdr *ht(void)
{
	return (struct ht_hdr *)H.hdr;
}

static void ht_create(void)
{
	tx_begin();
	struct ht_hdr *h = ht();
	void *b;
#if FOF_PERSISTENT
	pm_oid o = pm_tx_zalloc(H.pop, (size_t)HT_BUCKETS * sizeof(uint64_t));
	if (PM_OID_IS_NULL(o))
		die_lib("pm_tx_zalloc(buckets)", -1);
	b = H.base + o.off;
	set_add(b);
#else
	b = calloc(HT_BUCKETS, sizeof(uint64_t));
	if (!b)
		die("calloc(buckets)");
#endif
	FOF_ST(h, magic, 0x68617368ull);
	FOF_ST(h, buckets, R(b));
	FOF_ST(h, count, 0);
	tx_commit();
}

static inline struct ht_slot *ht_slot(uint64_t key)
{
	uint64_t *b = (uint64_t *)P(ht()->buckets);
	return (struct ht_slot *)&b[ht_bucket(key)];
}

/* Outside a transaction: plain loads. */
static int ht_lookup(uint64_t key, uint64_t *value)
{
	for (ref_t e = ht_slot(key)->ref; e;) {
		struct ht_entry *p = P(e);
		if (p->key == key) {
			*value = p->value;
			return 1;
		}
		e = p->next;
	}
	return 0;
}

/* In a transaction of its own (the per-operation transaction context). */
static int ht_lookup_tx(uint64_t key, uint64_t *value)
{
	int found = 0;
	tx_begin();
	struct ht_slot *s = ht_slot(key);
	for (ref_t e = FOF_LD(s, ref); e;) {
		struct ht_entry *p = P(e);
		if (FOF_LD(p, key) == key) {
			*value = FOF_LD(p, value);
			found = 1;
			break;
		}
		e = FOF_LD(p, next);
	}
	tx_commit();
	return found;
}

/* Insert a key known to be absent. */
static void ht_insert(uint64_t key, uint64_t value)
{
	tx_begin();
	struct ht_hdr *h = ht();
	struct ht_slot *s = ht_slot(key);
	struct ht_entry *n = tx_alloc(sizeof(*n));
	struct ht_entry init = {key, value, FOF_LD(s, ref)};
	tx_fresh(n, &init, sizeof(init));
	FOF_ST(s, ref, R(n));
	FOF_ST(h, count, FOF_LD(h, count) + 1);
	tx_commit();
}

/* Delete a key known to be present. */
static void ht_delete(uint64_t key)
{
	tx_begin();
	struct ht_hdr *h = ht();
	struct ht_slot *s = ht_slot(key);
	struct ht_entry *prev = NULL;
	ref_t e = FOF_LD(s, ref);
	while (e) {
		struct ht_entry *p = P(e);
		if (FOF_LD(p, key) == key)
			break;
		prev = p;
		e = FOF_LD(p, next);
	}
	if (!e)
		die("delete: key %016" PRIx64 " not in the table", key);
	struct ht_entry *victim = P(e);
	ref_t next = FOF_LD(victim, next);
	if (prev)
		FOF_ST(prev, next, next);
	else
		FOF_ST(s, ref, next);
	tx_free(victim);
	FOF_ST(h, count, FOF_LD(h, count) - 1);
	tx_commit();
}

#define DEAD_RING 1024

static void ht_check(const uint64_t *keys, uint64_t n, const uint64_t *dead, uint64_t ndead,
		     const char *when)
{
	struct ht_hdr *h = ht();
	if (h->magic != 0x68617368ull)
		die("%s: hash header magic %016" PRIx64, when, h->magic);
	uint64_t *b = (uint64_t *)P(h->buckets);
	uint64_t walked = 0;
	for (uint64_t i = 0; i < HT_BUCKETS; i++) {
		for (ref_t e = b[i]; e;) {
			struct ht_entry *p = P(e);
			if (ht_bucket(p->key) != i)
				die("%s: key %016" PRIx64 " in bucket %" PRIu64 ", expected %" PRIu64,
				    when, p->key, i, ht_bucket(p->key));
			if (p->value != value_of(p->key))
				die("%s: key %016" PRIx64 " has a wrong value", when, p->key);
			if (++walked > n)
				die("%s: more than %" PRIu64 " entries in the table", when, n);
			e = p->next;
		}
	}
	if (walked != n || h->count != n)
		die("%s: walked %" PRIu64 " entries, header count %" PRIu64 ", expected %" PRIu64, when,
		    walked, h->count, n);
	uint64_t v;
	for (uint64_t i = 0; i < n; i++)
		if (!ht_lookup(keys[i], &v) || v != value_of(keys[i]))
			die("%s: key %016" PRIx64 " missing or wrong", when, keys[i]);
	for (uint64_t i = 0; i < ndead; i++)
		if (ht_lookup(dead[i], &v))
			die("%s: deleted key %016" PRIx64 " still present", when, dead[i]);
}

/* ---- AVL tree ------------------------------------------------------------------------------ */

struct avl_hdr {
	uint64_t magic;
	uint64_t count;
	uint64_t root;
	uint64_t pad[5];
};

struct avl_node {
	uint64_t key;
	uint64_t value;
	uint64_t child[2];
	uint64_t height;
};

static struct avl_hdr *avl(void)
{
	return (struct avl_hdr *)H.hdr;
}

static inline uint64_t avl_h(ref_t r)
{
	if (!r)
		return 0;
	struct avl_node *n = P(r);
	return FOF_LD(n, height);
}

static inline void avl_fix_height(struct avl_node *n)
{
	uint64_t hl = avl_h(FOF_LD(n, child[0])), hr = avl_h(FOF_LD(n, child[1]));
	uint64_t nh = 1 + (hl > hr ? hl : hr);
	if (FOF_LD(n, height) != nh)
		FOF_ST(n, height, nh);
}

/* Rotate the subtree at x so that its child on side d comes up; returns the new subtree root. */
static struct avl_node *avl_rotate(struct avl_node *x, int d)
{
	struct avl_node *c = P(FOF_LD(x, child[d]));
	FOF_ST(x, child[d], FOF_LD(c, child[1 - d]));
	FOF_ST(c, child[1 - d], R(x));
	avl_fix_height(x);
	avl_fix_height(c);
	return c;
}

#define AVL_MAX_DEPTH 96

static void avl_insert(uint64_t key, uint64_t value)
{
	struct avl_node *path[AVL_MAX_DEPTH];
	int dir[AVL_MAX_DEPTH];
	int d = 0;
	tx_begin();
	struct avl_hdr *h = avl();
	ref_t cur = FOF_LD(h, root);
	while (cur) {
		if (d >= AVL_MAX_DEPTH)
			die("AVL tree deeper than %d", AVL_MAX_DEPTH);
		struct avl_node *p = P(cur);
		uint64_t k = FOF_LD(p, key);
		if (k == key)
			die("AVL insert: key %016" PRIx64 " already present", key);
		path[d] = p;
		dir[d] = key > k;
		cur = FOF_LD(p, child[dir[d]]);
		d++;
	}
	struct avl_node *n = tx_alloc(sizeof(*n));
	struct avl_node init = {key, value, {0, 0}, 1};
	tx_fresh(n, &init, sizeof(init));
	if (d == 0)
		FOF_ST(h, root, R(n));
	else
		FOF_ST(path[d - 1], child[dir[d - 1]], R(n));
	FOF_ST(h, count, FOF_LD(h, count) + 1);
	for (int i = d - 1; i >= 0; i--) {
		struct avl_node *x = path[i];
		uint64_t hl = avl_h(FOF_LD(x, child[0])), hr = avl_h(FOF_LD(x, child[1]));
		struct avl_node *sub;
		if (hl > hr + 1 || hr > hl + 1) {
			int s = hr > hl; /* the heavy side */
			struct avl_node *c = P(FOF_LD(x, child[s]));
			uint64_t cs = avl_h(FOF_LD(c, child[s])), co = avl_h(FOF_LD(c, child[1 - s]));
			if (co > cs) /* zig-zag: rotate the child first */
				FOF_ST(x, child[s], R(avl_rotate(c, 1 - s)));
			sub = avl_rotate(x, s);
		} else {
			uint64_t nh = 1 + (hl > hr ? hl : hr);
			if (FOF_LD(x, height) == nh)
				break; /* this subtree's height did not change: nothing above changes */
			FOF_ST(x, height, nh);
			continue;
		}
		/* After an insert's rotation the subtree has its old height again: link it and stop. */
		if (i == 0)
			FOF_ST(h, root, R(sub));
		else
			FOF_ST(path[i - 1], child[dir[i - 1]], R(sub));
		break;
	}
	tx_commit();
}

static int avl_find(uint64_t key, uint64_t *value)
{
	for (ref_t cur = avl()->root; cur;) {
		struct avl_node *p = P(cur);
		if (p->key == key) {
			*value = p->value;
			return 1;
		}
		cur = p->child[key > p->key];
	}
	return 0;
}

struct avl_walk {
	uint64_t count;
	uint64_t last;
	int have_last;
	const char *when;
};

static uint64_t avl_check_rec(ref_t r, struct avl_walk *w, int depth)
{
	if (!r)
		return 0;
	if (depth > AVL_MAX_DEPTH)
		die("%s: AVL tree deeper than %d (a cycle?)", w->when, AVL_MAX_DEPTH);
	struct avl_node *n = P(r);
	uint64_t hl = avl_check_rec(n->child[0], w, depth + 1);
	if (w->have_last && n->key <= w->last)
		die("%s: AVL keys out of order at %016" PRIx64, w->when, n->key);
	w->last = n->key;
	w->have_last = 1;
	if (n->value != value_of(n->key))
		die("%s: AVL key %016" PRIx64 " has a wrong value", w->when, n->key);
	w->count++;
	uint64_t hr = avl_check_rec(n->child[1], w, depth + 1);
	uint64_t hh = 1 + (hl > hr ? hl : hr);
	if (n->height != hh)
		die("%s: AVL node %016" PRIx64 " height %" PRIu64 ", expected %" PRIu64, w->when,
		    n->key, n->height, hh);
	if (hl > hr + 1 || hr > hl + 1)
		die("%s: AVL node %016" PRIx64 " out of balance (%" PRIu64 " / %" PRIu64 ")", w->when,
		    n->key, hl, hr);
	return hh;
}

static uint64_t avl_check(const uint64_t *keys, uint64_t n, const char *when)
{
	struct avl_hdr *h = avl();
	if (h->magic != 0x61766cull)
		die("%s: AVL header magic %016" PRIx64, when, h->magic);
	struct avl_walk w = {0, 0, 0, when};
	uint64_t height = avl_check_rec(h->root, &w, 0);
	if (w.count != n || h->count != n)
		die("%s: walked %" PRIu64 " nodes, header count %" PRIu64 ", expected %" PRIu64, when,
		    w.count, h->count, n);
	uint64_t v;
	for (uint64_t i = 0; i < n; i++)
		if (!avl_find(keys[i], &v) || v != value_of(keys[i]))
			die("%s: AVL key %016" PRIx64 " missing or wrong", when, keys[i]);
	return height;
}

/* ---- main ---------------------------------------------------------------------------------- */

static uint64_t parse_u64(const char *flag, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		die("bad value '%s' for %s", s, flag);
	return (uint64_t)v;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: fofbench --workload hash|avl [--entries N] [--ops N] [--update-pct P]\n"
		"                [--lookup-tx] [--inserts N] [--seed S] [--dir DIR] [--pool-mib M]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *workload = NULL, *dir = "/dev/shm";
	uint64_t entries = 100000, ops = 1000000, upct = 0, inserts = 100000, seed = 1;
	uint64_t pool_mib = 64;
	int lookup_tx = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--lookup-tx")) {
			lookup_tx = 1;
			continue;
		}
		if (!v)
			usage();
		if (!strcmp(a, "--workload"))
			workload = v;
		else if (!strcmp(a, "--entries"))
			entries = parse_u64(a, v);
		else if (!strcmp(a, "--ops"))
			ops = parse_u64(a, v);
		else if (!strcmp(a, "--update-pct"))
			upct = parse_u64(a, v);
		else if (!strcmp(a, "--inserts"))
			inserts = parse_u64(a, v);
		else if (!strcmp(a, "--seed"))
			seed = parse_u64(a, v);
		else if (!strcmp(a, "--dir"))
			dir = v;
		else if (!strcmp(a, "--pool-mib"))
			pool_mib = parse_u64(a, v);
		else
			usage();
		i++;
	}
	if (!workload || (strcmp(workload, "hash") && strcmp(workload, "avl")))
		usage();
	if (upct > 100)
		die("--update-pct %" PRIu64 " is above 100", upct);
	if (entries == 0 || inserts == 0)
		die("--entries and --inserts must be positive");
	int is_hash = !strcmp(workload, "hash");
#if !FOF_PERSISTENT
	if (lookup_tx)
		die("--lookup-tx: the volatile build has no transactions");
#endif

	char path[4096];
	snprintf(path, sizeof(path), "%s/fof-%s-%d.pool", dir, FOF_BUILD, (int)getpid());
#if FOF_PERSISTENT
	unlink(path);
#endif
	heap_create(path, pool_mib << 20);

	rng_t rng;
	rng_seed(&rng, seed);
	uint64_t next_key = 0; /* key i is mix64(i ^ salt): distinct for distinct i */
	const uint64_t salt = mix64(seed + 0x1234);
#define NEW_KEY() mix64((next_key++) ^ salt)

	uint64_t checksum = 0, lookups = 0, ins = 0, dels = 0, t0, t1, nops, height = 0;
	uint64_t *keys = NULL, nkeys = 0;
	uint64_t dead[DEAD_RING], ndead = 0;

	if (is_hash) {
		ht_create();
		keys = malloc((entries + 1) * sizeof(uint64_t));
		if (!keys)
			die("malloc(keys)");
		for (uint64_t i = 0; i < entries; i++) {
			uint64_t k = NEW_KEY();
			ht_insert(k, value_of(k));
			keys[nkeys++] = k;
		}
		int insert_next = 1;
		t0 = now_ns();
		for (uint64_t i = 0; i < ops; i++) {
			if (rng_below(&rng, 100) < upct) {
				if (insert_next) {
					uint64_t k = NEW_KEY();
					ht_insert(k, value_of(k));
					keys[nkeys++] = k;
					ins++;
				} else {
					uint64_t j = rng_below(&rng, nkeys);
					uint64_t k = keys[j];
					ht_delete(k);
					keys[j] = keys[--nkeys];
					dead[ndead++ % DEAD_RING] = k;
					dels++;
				}
				insert_next = !insert_next;
			} else {
				uint64_t k = keys[rng_below(&rng, nkeys)], v = 0;
				int found = lookup_tx ? ht_lookup_tx(k, &v) : ht_lookup(k, &v);
				if (!found)
					die("lookup: key %016" PRIx64 " not found", k);
				checksum += v;
				lookups++;
			}
		}
		t1 = now_ns();
		nops = ops;
		uint64_t nd = ndead < DEAD_RING ? ndead : DEAD_RING;
		ht_check(keys, nkeys, dead, nd, "after the timed phase");
#if FOF_PERSISTENT
		heap_reopen(path);
		ht_check(keys, nkeys, dead, nd, "after close + open");
#endif
	} else {
		tx_begin();
		FOF_ST(avl(), magic, 0x61766cull);
		FOF_ST(avl(), count, 0);
		FOF_ST(avl(), root, 0);
		tx_commit();
		keys = malloc(inserts * sizeof(uint64_t));
		if (!keys)
			die("malloc(keys)");
		for (uint64_t i = 0; i < inserts; i++)
			keys[i] = NEW_KEY();
		t0 = now_ns();
		for (uint64_t i = 0; i < inserts; i++)
			avl_insert(keys[i], value_of(keys[i]));
		t1 = now_ns();
		nops = inserts;
		nkeys = inserts;
		height = avl_check(keys, nkeys, "after the timed phase");
#if FOF_PERSISTENT
		heap_reopen(path);
		avl_check(keys, nkeys, "after close + open");
#endif
		for (uint64_t i = 0; i < nkeys; i++)
			checksum += keys[i] >> 8;
	}

	int on_demand = FOF_PERSISTENT ? heap_on_demand() : -1;
#if FOF_PERSISTENT
	heap_close();
	unlink(path);
#endif
	const char *od = getenv("KAVACH_ON_DEMAND_MS");
	printf("{\"build\":\"%s\",\"workload\":\"%s\",\"update_pct\":%" PRIu64 ",\"lookup_tx\":%d,"
	       "\"entries\":%" PRIu64 ",\"ops\":%" PRIu64 ",\"lookups\":%" PRIu64 ",\"inserts\":%" PRIu64
	       ",\"deletes\":%" PRIu64 ",\"seed\":%" PRIu64 ",\"ns\":%" PRIu64 ",\"ns_per_op\":%.2f,"
	       "\"checksum\":\"%016" PRIx64 "\",\"final_count\":%" PRIu64 ",\"avl_height\":%" PRIu64
	       ",\"on_demand\":%d,\"on_demand_ms\":\"%s\",\"tx\":%" PRIu64 ",\"tx_sampled_not_redo\":%" PRIu64
	       ",\"verified\":true}\n",
	       FOF_BUILD, workload, is_hash ? upct : 100, lookup_tx, is_hash ? entries : 0, nops,
	       lookups, is_hash ? ins : inserts, dels, seed, t1 - t0, (double)(t1 - t0) / (double)nops,
	       checksum, nkeys, height, on_demand, od ? od : "", H.tx_count, H.tx_not_redo);
	free(keys);
	return 0;
}
