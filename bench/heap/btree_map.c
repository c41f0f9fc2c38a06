/*
 * btree_map.c: a persistent B-tree of order 8 (minimum degree t = 4: 3..7 keys per node except
 * the root, up to 8 children), keys and values in the nodes. Insertion splits full nodes on the
 * way down and deletion makes every node it descends into hold at least t keys first (borrowing
 * from a sibling or merging), so each operation is a single pass from the root.
 *
 * A node is 256 bytes and is snapshotted whole, once per transaction, before its first change.
 */
#include "maps.h"

#define BT_T 4
#define BT_MAX (2 * BT_T - 1)

struct bt_node {
	uint64_t n;    /* keys in use */
	uint64_t leaf; /* 1 for a leaf */
	uint64_t key[BT_MAX];
	uint64_t val[BT_MAX];
	pm_oid child[BT_MAX + 1];
};
_Static_assert(sizeof(struct bt_node) == 256, "B-tree node is 256 bytes");

struct bt_map {
	pm_oid root;
	uint64_t count;
	uint64_t pad;
};

struct btc {
	pm_pool *pop;
	struct snapset ss;
	pm_oid mapoid;
	struct bt_map *m;
};

#define NODE(c, o) ((struct bt_node *)pm_direct((c)->pop, (o)))

static inline int snap_node(struct btc *c, pm_oid o)
{
	return snap_obj(c->pop, &c->ss, o, sizeof(struct bt_node));
}

static inline int snap_hdr(struct btc *c)
{
	return snap_obj(c->pop, &c->ss, c->mapoid, sizeof(struct bt_map));
}

static int new_node(struct btc *c, pm_oid *out, struct bt_node **outn)
{
	pm_oid o = pm_tx_alloc(c->pop, sizeof(struct bt_node));
	if (PM_OID_IS_NULL(o))
		return map_fail("pm_tx_alloc(btree node)", -1);
	snap_note(&c->ss, o); /* new in this transaction: never snapshotted */
	*out = o;
	*outn = NODE(c, o);
	return MAP_OK;
}

/* x->child[i] is full: split it around its median, which moves up into x (not full). */
static int split_child(struct btc *c, pm_oid x, struct bt_node *xn, uint64_t i)
{
	pm_oid y = xn->child[i];
	struct bt_node *yn = NODE(c, y);
	pm_oid z;
	struct bt_node *zn;
	TRY(new_node(c, &z, &zn));
	zn->leaf = yn->leaf;
	zn->n = BT_T - 1;
	for (int j = 0; j < BT_T - 1; j++) {
		zn->key[j] = yn->key[j + BT_T];
		zn->val[j] = yn->val[j + BT_T];
	}
	if (!yn->leaf)
		for (int j = 0; j < BT_T; j++)
			zn->child[j] = yn->child[j + BT_T];

	TRY(snap_node(c, y));
	yn->n = BT_T - 1;

	TRY(snap_node(c, x));
	for (uint64_t j = xn->n; j > i; j--)
		xn->child[j + 1] = xn->child[j];
	xn->child[i + 1] = z;
	for (uint64_t j = xn->n; j > i; j--) {
		xn->key[j] = xn->key[j - 1];
		xn->val[j] = xn->val[j - 1];
	}
	xn->key[i] = yn->key[BT_T - 1];
	xn->val[i] = yn->val[BT_T - 1];
	xn->n++;
	return MAP_OK;
}

static int insert_body(struct btc *c, uint64_t k, uint64_t v)
{
	struct bt_map *m = c->m;
	if (PM_OID_IS_NULL(m->root)) {
		pm_oid r;
		struct bt_node *rn;
		TRY(new_node(c, &r, &rn));
		rn->n = 1;
		rn->leaf = 1;
		rn->key[0] = k;
		rn->val[0] = v;
		TRY(snap_hdr(c));
		m->root = r;
		m->count++;
		return MAP_OK;
	}
	pm_oid x = m->root;
	struct bt_node *xn = NODE(c, x);
	if (xn->n == BT_MAX) {
		pm_oid s;
		struct bt_node *sn;
		TRY(new_node(c, &s, &sn));
		sn->n = 0;
		sn->leaf = 0;
		sn->child[0] = x;
		TRY(snap_hdr(c));
		m->root = s;
		TRY(split_child(c, s, sn, 0));
		x = s;
		xn = sn;
	}
	for (;;) {
		uint64_t i = 0;
		while (i < xn->n && xn->key[i] < k)
			i++;
		if (i < xn->n && xn->key[i] == k)
			return MAP_EXISTS;
		if (xn->leaf) {
			TRY(snap_node(c, x));
			for (uint64_t j = xn->n; j > i; j--) {
				xn->key[j] = xn->key[j - 1];
				xn->val[j] = xn->val[j - 1];
			}
			xn->key[i] = k;
			xn->val[i] = v;
			xn->n++;
			TRY(snap_hdr(c));
			m->count++;
			return MAP_OK;
		}
		pm_oid ch = xn->child[i];
		struct bt_node *cn = NODE(c, ch);
		if (cn->n == BT_MAX) {
			TRY(split_child(c, x, xn, i));
			if (xn->key[i] == k)
				return MAP_EXISTS;
			if (k > xn->key[i])
				i++;
			ch = xn->child[i];
			cn = NODE(c, ch);
		}
		x = ch;
		xn = cn;
	}
}

/*
 * Merge x->child[i+1] and the key x->key[i] into x->child[i] (both children hold t-1 keys).
 * If x is the root and becomes empty, the merged child becomes the root.
 */
static int merge_children(struct btc *c, pm_oid x, struct bt_node *xn, uint64_t i)
{
	pm_oid y = xn->child[i], z = xn->child[i + 1];
	struct bt_node *yn = NODE(c, y), *zn = NODE(c, z);
	uint64_t yk = yn->n;
	if (yk + 1 + zn->n > BT_MAX)
		die("btree: merging nodes of %" PRIu64 " and %" PRIu64 " keys", yk, zn->n);
	TRY(snap_node(c, y));
	yn->key[yk] = xn->key[i];
	yn->val[yk] = xn->val[i];
	for (uint64_t j = 0; j < zn->n; j++) {
		yn->key[yk + 1 + j] = zn->key[j];
		yn->val[yk + 1 + j] = zn->val[j];
	}
	if (!yn->leaf)
		for (uint64_t j = 0; j <= zn->n; j++)
			yn->child[yk + 1 + j] = zn->child[j];
	yn->n = yk + 1 + zn->n;

	TRY(snap_node(c, x));
	for (uint64_t j = i; j + 1 < xn->n; j++) {
		xn->key[j] = xn->key[j + 1];
		xn->val[j] = xn->val[j + 1];
	}
	for (uint64_t j = i + 1; j < xn->n; j++)
		xn->child[j] = xn->child[j + 1];
	xn->n--;

	int err = pm_tx_free(c->pop, z);
	if (err != 0)
		return map_fail("pm_tx_free(btree node)", err);
	if (xn->n == 0) { /* only the root can empty */
		TRY(snap_hdr(c));
		c->m->root = y;
		if ((err = pm_tx_free(c->pop, x)) != 0)
			return map_fail("pm_tx_free(btree root)", err);
	}
	return MAP_OK;
}

/* x->child[i] holds t-1 keys; its left sibling has at least t: rotate one key right. */
static int borrow_left(struct btc *c, pm_oid x, struct bt_node *xn, uint64_t i)
{
	pm_oid ch = xn->child[i], l = xn->child[i - 1];
	struct bt_node *cn = NODE(c, ch), *ln = NODE(c, l);
	TRY(snap_node(c, ch));
	for (uint64_t j = cn->n; j > 0; j--) {
		cn->key[j] = cn->key[j - 1];
		cn->val[j] = cn->val[j - 1];
	}
	if (!cn->leaf)
		for (uint64_t j = cn->n + 1; j > 0; j--)
			cn->child[j] = cn->child[j - 1];
	cn->key[0] = xn->key[i - 1];
	cn->val[0] = xn->val[i - 1];
	if (!cn->leaf)
		cn->child[0] = ln->child[ln->n];
	cn->n++;
	TRY(snap_node(c, x));
	xn->key[i - 1] = ln->key[ln->n - 1];
	xn->val[i - 1] = ln->val[ln->n - 1];
	TRY(snap_node(c, l));
	ln->n--;
	return MAP_OK;
}

/* x->child[i] holds t-1 keys; its right sibling has at least t: rotate one key left. */
static int borrow_right(struct btc *c, pm_oid x, struct bt_node *xn, uint64_t i)
{
	pm_oid ch = xn->child[i], r = xn->child[i + 1];
	struct bt_node *cn = NODE(c, ch), *rn = NODE(c, r);
	TRY(snap_node(c, ch));
	cn->key[cn->n] = xn->key[i];
	cn->val[cn->n] = xn->val[i];
	if (!cn->leaf)
		cn->child[cn->n + 1] = rn->child[0];
	cn->n++;
	TRY(snap_node(c, x));
	xn->key[i] = rn->key[0];
	xn->val[i] = rn->val[0];
	TRY(snap_node(c, r));
	for (uint64_t j = 0; j + 1 < rn->n; j++) {
		rn->key[j] = rn->key[j + 1];
		rn->val[j] = rn->val[j + 1];
	}
	if (!rn->leaf)
		for (uint64_t j = 0; j < rn->n; j++)
			rn->child[j] = rn->child[j + 1];
	rn->n--;
	return MAP_OK;
}

static int remove_body(struct btc *c, uint64_t k)
{
	struct bt_map *m = c->m;
	if (PM_OID_IS_NULL(m->root))
		return MAP_NOTFOUND;
	pm_oid x = m->root;
	struct bt_node *xn = NODE(c, x);
	for (;;) {
		uint64_t i = 0;
		while (i < xn->n && xn->key[i] < k)
			i++;
		if (i < xn->n && xn->key[i] == k) {
			if (xn->leaf) {
				TRY(snap_node(c, x));
				for (uint64_t j = i; j + 1 < xn->n; j++) {
					xn->key[j] = xn->key[j + 1];
					xn->val[j] = xn->val[j + 1];
				}
				xn->n--;
				TRY(snap_hdr(c));
				if (xn->n == 0) { /* the root leaf emptied */
					m->root = PM_OID_NULL;
					int err = pm_tx_free(c->pop, x);
					if (err != 0)
						return map_fail("pm_tx_free(btree root)", err);
				}
				m->count--;
				return MAP_OK;
			}
			pm_oid y = xn->child[i], z = xn->child[i + 1];
			struct bt_node *yn = NODE(c, y), *zn = NODE(c, z);
			if (yn->n >= BT_T) {
				/* Replace k by its predecessor, then delete that from y. */
				struct bt_node *pn = yn;
				while (!pn->leaf)
					pn = NODE(c, pn->child[pn->n]);
				uint64_t pk = pn->key[pn->n - 1], pv = pn->val[pn->n - 1];
				TRY(snap_node(c, x));
				xn->key[i] = pk;
				xn->val[i] = pv;
				k = pk;
				x = y;
				xn = yn;
			} else if (zn->n >= BT_T) {
				/* Replace k by its successor, then delete that from z. */
				struct bt_node *sn = zn;
				while (!sn->leaf)
					sn = NODE(c, sn->child[0]);
				uint64_t sk = sn->key[0], sv = sn->val[0];
				TRY(snap_node(c, x));
				xn->key[i] = sk;
				xn->val[i] = sv;
				k = sk;
				x = z;
				xn = zn;
			} else {
				TRY(merge_children(c, x, xn, i));
				x = y;
				xn = yn;
			}
			continue;
		}
		if (xn->leaf)
			return MAP_NOTFOUND;
		pm_oid ch = xn->child[i];
		struct bt_node *cn = NODE(c, ch);
		if (cn->n == BT_T - 1) {
			if (i > 0 && NODE(c, xn->child[i - 1])->n >= BT_T) {
				TRY(borrow_left(c, x, xn, i));
			} else if (i < xn->n && NODE(c, xn->child[i + 1])->n >= BT_T) {
				TRY(borrow_right(c, x, xn, i));
			} else if (i < xn->n) {
				TRY(merge_children(c, x, xn, i));
			} else {
				ch = xn->child[i - 1];
				cn = NODE(c, ch);
				TRY(merge_children(c, x, xn, i - 1));
			}
		}
		x = ch;
		xn = cn;
	}
}

static void bt_create(pm_pool *pop, pm_oid *dest)
{
	map_create_header(pop, dest, sizeof(struct bt_map));
}

static int bt_insert(pm_pool *pop, pm_oid map, uint64_t key, uint64_t value)
{
	struct btc c = {.pop = pop, .mapoid = map};
	c.m = pm_direct(pop, map);
	MAP_TX(pop, insert_body(&c, key, value));
}

static int bt_remove(pm_pool *pop, pm_oid map, uint64_t key)
{
	struct btc c = {.pop = pop, .mapoid = map};
	c.m = pm_direct(pop, map);
	MAP_TX(pop, remove_body(&c, key));
}

static int bt_lookup(pm_pool *pop, pm_oid map, uint64_t key, uint64_t *value)
{
	struct bt_map *m = pm_direct(pop, map);
	pm_oid x = m->root;
	while (!PM_OID_IS_NULL(x)) {
		struct bt_node *xn = pm_direct(pop, x);
		uint64_t i = 0;
		while (i < xn->n && xn->key[i] < key)
			i++;
		if (i < xn->n && xn->key[i] == key) {
			*value = xn->val[i];
			return MAP_OK;
		}
		if (xn->leaf)
			break;
		x = xn->child[i];
	}
	return MAP_NOTFOUND;
}

struct bt_walk {
	pm_pool *pop;
	int64_t leaf_depth;
	uint64_t keys;
	uint64_t nodes;
};

static void walk_node(struct bt_walk *w, pm_oid x, int is_root, int has_lo, uint64_t lo,
		      int has_hi, uint64_t hi, int64_t depth)
{
	if (PM_OID_IS_NULL(x))
		die("btree: null child at depth %" PRId64, depth);
	struct bt_node *xn = pm_direct(w->pop, x);
	if (xn == NULL)
		die("btree: node oid off=%" PRIu64 " does not translate", x.off);
	if (xn->n > BT_MAX || xn->n < (is_root ? 1 : BT_T - 1))
		die("btree: node off=%" PRIu64 " holds %" PRIu64 " keys", x.off, xn->n);
	if (xn->leaf != 0 && xn->leaf != 1)
		die("btree: node off=%" PRIu64 " leaf flag %" PRIu64, x.off, xn->leaf);
	w->nodes++;
	w->keys += xn->n;
	for (uint64_t i = 0; i < xn->n; i++) {
		if ((has_lo && xn->key[i] <= lo) || (has_hi && xn->key[i] >= hi) ||
		    (i > 0 && xn->key[i] <= xn->key[i - 1]))
			die("btree: key order violated in node off=%" PRIu64 " at %" PRIu64, x.off, i);
	}
	if (xn->leaf) {
		if (w->leaf_depth < 0)
			w->leaf_depth = depth;
		else if (w->leaf_depth != depth)
			die("btree: leaves at depths %" PRId64 " and %" PRId64, w->leaf_depth, depth);
		return;
	}
	for (uint64_t i = 0; i <= xn->n; i++) {
		int clo = i > 0 ? 1 : has_lo, chi = i < xn->n ? 1 : has_hi;
		uint64_t vlo = i > 0 ? xn->key[i - 1] : lo, vhi = i < xn->n ? xn->key[i] : hi;
		walk_node(w, xn->child[i], 0, clo, vlo, chi, vhi, depth + 1);
	}
}

static uint64_t bt_check(pm_pool *pop, pm_oid map)
{
	struct bt_map *m = pm_direct(pop, map);
	if (PM_OID_IS_NULL(m->root))
		return 0;
	struct bt_walk w = {.pop = pop, .leaf_depth = -1};
	walk_node(&w, m->root, 1, 0, 0, 0, 0, 0);
	return w.keys;
}

static uint64_t bt_count(pm_pool *pop, pm_oid map)
{
	return ((struct bt_map *)pm_direct(pop, map))->count;
}

const struct map_ops btree_map_ops = {
	.name = "btree",
	.create = bt_create,
	.insert = bt_insert,
	.remove = bt_remove,
	.lookup = bt_lookup,
	.check = bt_check,
	.count = bt_count,
};
