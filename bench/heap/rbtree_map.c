/*
 * rbtree_map.c: a persistent red-black tree with parent pointers and a per-map sentinel node
 * (the "nil" leaf, always black; the root's parent is nil). Insertion and deletion follow the
 * textbook algorithms (rotations, recolouring; deletion moves the successor node into place
 * instead of copying keys, so an entry's node never changes while it is in the tree).
 *
 * A node is 80 bytes and is snapshotted whole, once per transaction, before its first change.
 * The sentinel's parent field is written by deletion (as in the textbook), so it is snapshotted
 * like any node when that happens.
 */
#include "maps.h"

#define RB_BLACK 0
#define RB_RED 1

struct rb_node {
	uint64_t key;
	uint64_t val;
	uint64_t color;
	uint64_t pad;
	pm_oid parent;
	pm_oid left;
	pm_oid right;
};
_Static_assert(sizeof(struct rb_node) == 80, "red-black node is 80 bytes");

struct rb_map {
	pm_oid root;
	pm_oid nil;
	uint64_t count;
	uint64_t pad;
};

struct rbc {
	pm_pool *pop;
	struct snapset ss;
	pm_oid mapoid;
	struct rb_map *m;
	pm_oid nil;
};

#define RB(c, o) ((struct rb_node *)pm_direct((c)->pop, (o)))
#define IS_NIL(c, o) PM_OID_EQ((o), (c)->nil)

static inline int snap_node(struct rbc *c, pm_oid o)
{
	return snap_obj(c->pop, &c->ss, o, sizeof(struct rb_node));
}

static inline int snap_hdr(struct rbc *c)
{
	return snap_obj(c->pop, &c->ss, c->mapoid, sizeof(struct rb_map));
}

static inline int set_color(struct rbc *c, pm_oid o, uint64_t color)
{
	struct rb_node *n = RB(c, o);
	if (n->color == color)
		return MAP_OK;
	TRY(snap_node(c, o));
	n->color = color;
	return MAP_OK;
}

/* Replace u's link from its parent (or the root) by v, and set v's parent. */
static int set_parent_link(struct rbc *c, pm_oid u, pm_oid up, pm_oid v)
{
	if (IS_NIL(c, up)) {
		TRY(snap_hdr(c));
		c->m->root = v;
	} else {
		struct rb_node *pn = RB(c, up);
		TRY(snap_node(c, up));
		if (PM_OID_EQ(u, pn->left))
			pn->left = v;
		else
			pn->right = v;
	}
	return MAP_OK;
}

static int rotate_left(struct rbc *c, pm_oid x)
{
	struct rb_node *xn = RB(c, x);
	pm_oid y = xn->right;
	struct rb_node *yn = RB(c, y);
	TRY(snap_node(c, x));
	TRY(snap_node(c, y));
	xn->right = yn->left;
	if (!IS_NIL(c, yn->left)) {
		TRY(snap_node(c, yn->left));
		RB(c, yn->left)->parent = x;
	}
	TRY(set_parent_link(c, x, xn->parent, y));
	yn->parent = xn->parent;
	yn->left = x;
	xn->parent = y;
	return MAP_OK;
}

static int rotate_right(struct rbc *c, pm_oid x)
{
	struct rb_node *xn = RB(c, x);
	pm_oid y = xn->left;
	struct rb_node *yn = RB(c, y);
	TRY(snap_node(c, x));
	TRY(snap_node(c, y));
	xn->left = yn->right;
	if (!IS_NIL(c, yn->right)) {
		TRY(snap_node(c, yn->right));
		RB(c, yn->right)->parent = x;
	}
	TRY(set_parent_link(c, x, xn->parent, y));
	yn->parent = xn->parent;
	yn->right = x;
	xn->parent = y;
	return MAP_OK;
}

static int insert_fixup(struct rbc *c, pm_oid z)
{
	for (;;) {
		pm_oid p = RB(c, z)->parent;
		if (RB(c, p)->color != RB_RED)
			break;
		pm_oid g = RB(c, p)->parent; /* p is red, so not the root: g exists */
		struct rb_node *gn = RB(c, g);
		if (PM_OID_EQ(p, gn->left)) {
			pm_oid u = gn->right;
			if (RB(c, u)->color == RB_RED) {
				TRY(set_color(c, p, RB_BLACK));
				TRY(set_color(c, u, RB_BLACK));
				TRY(set_color(c, g, RB_RED));
				z = g;
				continue;
			}
			if (PM_OID_EQ(z, RB(c, p)->right)) {
				z = p;
				TRY(rotate_left(c, z));
				p = RB(c, z)->parent;
			}
			TRY(set_color(c, p, RB_BLACK));
			TRY(set_color(c, g, RB_RED));
			TRY(rotate_right(c, g));
		} else {
			pm_oid u = gn->left;
			if (RB(c, u)->color == RB_RED) {
				TRY(set_color(c, p, RB_BLACK));
				TRY(set_color(c, u, RB_BLACK));
				TRY(set_color(c, g, RB_RED));
				z = g;
				continue;
			}
			if (PM_OID_EQ(z, RB(c, p)->left)) {
				z = p;
				TRY(rotate_right(c, z));
				p = RB(c, z)->parent;
			}
			TRY(set_color(c, p, RB_BLACK));
			TRY(set_color(c, g, RB_RED));
			TRY(rotate_left(c, g));
		}
	}
	return set_color(c, c->m->root, RB_BLACK);
}

static int insert_body(struct rbc *c, uint64_t k, uint64_t v)
{
	struct rb_map *m = c->m;
	pm_oid y = c->nil, x = m->root;
	while (!IS_NIL(c, x)) {
		struct rb_node *xn = RB(c, x);
		y = x;
		if (k < xn->key)
			x = xn->left;
		else if (k > xn->key)
			x = xn->right;
		else
			return MAP_EXISTS;
	}
	pm_oid z = pm_tx_alloc(c->pop, sizeof(struct rb_node));
	if (PM_OID_IS_NULL(z))
		return map_fail("pm_tx_alloc(rbtree node)", -1);
	snap_note(&c->ss, z);
	struct rb_node *zn = RB(c, z);
	zn->key = k;
	zn->val = v;
	zn->color = RB_RED;
	zn->pad = 0;
	zn->parent = y;
	zn->left = c->nil;
	zn->right = c->nil;
	if (IS_NIL(c, y)) {
		TRY(snap_hdr(c));
		m->root = z;
	} else {
		struct rb_node *yn = RB(c, y);
		TRY(snap_node(c, y));
		if (k < yn->key)
			yn->left = z;
		else
			yn->right = z;
	}
	TRY(insert_fixup(c, z));
	TRY(snap_hdr(c));
	m->count++;
	return MAP_OK;
}

/* Put v where u was (u's parent now points to v; v's parent is u's, even if v is nil). */
static int transplant(struct rbc *c, pm_oid u, pm_oid v)
{
	pm_oid up = RB(c, u)->parent;
	TRY(set_parent_link(c, u, up, v));
	TRY(snap_node(c, v));
	RB(c, v)->parent = up;
	return MAP_OK;
}

static int delete_fixup(struct rbc *c, pm_oid x)
{
	while (!PM_OID_EQ(x, c->m->root) && RB(c, x)->color == RB_BLACK) {
		pm_oid p = RB(c, x)->parent;
		struct rb_node *pn = RB(c, p);
		if (PM_OID_EQ(x, pn->left)) {
			pm_oid w = pn->right;
			if (RB(c, w)->color == RB_RED) {
				TRY(set_color(c, w, RB_BLACK));
				TRY(set_color(c, p, RB_RED));
				TRY(rotate_left(c, p));
				w = pn->right;
			}
			struct rb_node *wn = RB(c, w);
			if (RB(c, wn->left)->color == RB_BLACK && RB(c, wn->right)->color == RB_BLACK) {
				TRY(set_color(c, w, RB_RED));
				x = p;
			} else {
				if (RB(c, wn->right)->color == RB_BLACK) {
					TRY(set_color(c, wn->left, RB_BLACK));
					TRY(set_color(c, w, RB_RED));
					TRY(rotate_right(c, w));
					w = pn->right;
					wn = RB(c, w);
				}
				TRY(set_color(c, w, pn->color));
				TRY(set_color(c, p, RB_BLACK));
				TRY(set_color(c, wn->right, RB_BLACK));
				TRY(rotate_left(c, p));
				x = c->m->root;
			}
		} else {
			pm_oid w = pn->left;
			if (RB(c, w)->color == RB_RED) {
				TRY(set_color(c, w, RB_BLACK));
				TRY(set_color(c, p, RB_RED));
				TRY(rotate_right(c, p));
				w = pn->left;
			}
			struct rb_node *wn = RB(c, w);
			if (RB(c, wn->right)->color == RB_BLACK && RB(c, wn->left)->color == RB_BLACK) {
				TRY(set_color(c, w, RB_RED));
				x = p;
			} else {
				if (RB(c, wn->left)->color == RB_BLACK) {
					TRY(set_color(c, wn->right, RB_BLACK));
					TRY(set_color(c, w, RB_RED));
					TRY(rotate_left(c, w));
					w = pn->left;
					wn = RB(c, w);
				}
				TRY(set_color(c, w, pn->color));
				TRY(set_color(c, p, RB_BLACK));
				TRY(set_color(c, wn->left, RB_BLACK));
				TRY(rotate_right(c, p));
				x = c->m->root;
			}
		}
	}
	return set_color(c, x, RB_BLACK);
}

static int remove_body(struct rbc *c, uint64_t k)
{
	pm_oid z = c->m->root;
	while (!IS_NIL(c, z)) {
		struct rb_node *zn = RB(c, z);
		if (k < zn->key)
			z = zn->left;
		else if (k > zn->key)
			z = zn->right;
		else
			break;
	}
	if (IS_NIL(c, z))
		return MAP_NOTFOUND;
	struct rb_node *zn = RB(c, z);
	pm_oid x;
	uint64_t removed_color = zn->color;
	if (IS_NIL(c, zn->left)) {
		x = zn->right;
		TRY(transplant(c, z, zn->right));
	} else if (IS_NIL(c, zn->right)) {
		x = zn->left;
		TRY(transplant(c, z, zn->left));
	} else {
		pm_oid y = zn->right; /* successor: leftmost of the right subtree */
		while (!IS_NIL(c, RB(c, y)->left))
			y = RB(c, y)->left;
		struct rb_node *yn = RB(c, y);
		removed_color = yn->color;
		x = yn->right;
		if (PM_OID_EQ(yn->parent, z)) {
			TRY(snap_node(c, x));
			RB(c, x)->parent = y;
		} else {
			TRY(transplant(c, y, yn->right));
			TRY(snap_node(c, y));
			yn->right = zn->right;
			TRY(snap_node(c, yn->right));
			RB(c, yn->right)->parent = y;
		}
		TRY(transplant(c, z, y));
		TRY(snap_node(c, y));
		yn->left = zn->left;
		TRY(snap_node(c, yn->left));
		RB(c, yn->left)->parent = y;
		yn->color = zn->color;
	}
	if (removed_color == RB_BLACK)
		TRY(delete_fixup(c, x));
	int err = pm_tx_free(c->pop, z);
	if (err != 0)
		return map_fail("pm_tx_free(rbtree node)", err);
	TRY(snap_hdr(c));
	c->m->count--;
	return MAP_OK;
}

static void rb_create(pm_pool *pop, pm_oid *dest)
{
	/* Header and sentinel in one transaction. */
	int err = pm_tx_begin(pop);
	if (err != 0)
		die_pm("pm_tx_begin", err);
	pm_oid h = pm_tx_zalloc(pop, sizeof(struct rb_map));
	pm_oid nil = pm_tx_zalloc(pop, sizeof(struct rb_node));
	if (PM_OID_IS_NULL(h) || PM_OID_IS_NULL(nil)) {
		err = pm_tx_commit(pop);
		die_pm("pm_tx_zalloc(rbtree header/sentinel)", err);
	}
	struct rb_node *nn = pm_direct(pop, nil);
	nn->color = RB_BLACK;
	nn->parent = nn->left = nn->right = nil;
	struct rb_map *m = pm_direct(pop, h);
	m->nil = nil;
	m->root = nil;
	m->count = 0;
	if ((err = pm_tx_add_direct(pop, dest, sizeof(*dest))) != 0) {
		pm_tx_commit(pop);
		die_pm("pm_tx_add_direct(map slot)", err);
	}
	*dest = h;
	if ((err = pm_tx_commit(pop)) != 0)
		die_pm("pm_tx_commit(rbtree create)", err);
}

static void init_ctx(struct rbc *c, pm_pool *pop, pm_oid map)
{
	c->pop = pop;
	c->ss.n = 0;
	c->mapoid = map;
	c->m = pm_direct(pop, map);
	c->nil = c->m->nil;
}

static int rb_insert(pm_pool *pop, pm_oid map, uint64_t key, uint64_t value)
{
	struct rbc c;
	init_ctx(&c, pop, map);
	MAP_TX(pop, insert_body(&c, key, value));
}

static int rb_remove(pm_pool *pop, pm_oid map, uint64_t key)
{
	struct rbc c;
	init_ctx(&c, pop, map);
	MAP_TX(pop, remove_body(&c, key));
}

static int rb_lookup(pm_pool *pop, pm_oid map, uint64_t key, uint64_t *value)
{
	struct rb_map *m = pm_direct(pop, map);
	pm_oid x = m->root;
	while (!PM_OID_EQ(x, m->nil)) {
		struct rb_node *xn = pm_direct(pop, x);
		if (key < xn->key)
			x = xn->left;
		else if (key > xn->key)
			x = xn->right;
		else {
			*value = xn->val;
			return MAP_OK;
		}
	}
	return MAP_NOTFOUND;
}

struct rb_walk {
	pm_pool *pop;
	pm_oid nil;
	uint64_t nodes;
};

/* Returns the black height of the subtree at x (nil counts 1). */
static uint64_t walk_node(struct rb_walk *w, pm_oid x, pm_oid parent, int has_lo, uint64_t lo,
			  int has_hi, uint64_t hi, int depth)
{
	if (PM_OID_EQ(x, w->nil))
		return 1;
	if (depth > 200)
		die("rbtree: deeper than 200 (cycle?)");
	struct rb_node *xn = pm_direct(w->pop, x);
	if (xn == NULL)
		die("rbtree: node oid off=%" PRIu64 " does not translate", x.off);
	if (!PM_OID_EQ(xn->parent, parent))
		die("rbtree: node off=%" PRIu64 " has a wrong parent pointer", x.off);
	if ((has_lo && xn->key <= lo) || (has_hi && xn->key >= hi))
		die("rbtree: key order violated at node off=%" PRIu64, x.off);
	if (xn->color != RB_RED && xn->color != RB_BLACK)
		die("rbtree: node off=%" PRIu64 " colour %" PRIu64, x.off, xn->color);
	if (xn->color == RB_RED) {
		struct rb_node *l = pm_direct(w->pop, xn->left), *r = pm_direct(w->pop, xn->right);
		if (l->color == RB_RED || r->color == RB_RED)
			die("rbtree: red node off=%" PRIu64 " has a red child", x.off);
	}
	w->nodes++;
	uint64_t bl = walk_node(w, xn->left, x, has_lo, lo, 1, xn->key, depth + 1);
	uint64_t br = walk_node(w, xn->right, x, 1, xn->key, has_hi, hi, depth + 1);
	if (bl != br)
		die("rbtree: black heights %" PRIu64 " and %" PRIu64 " under node off=%" PRIu64, bl, br,
		    x.off);
	return bl + (xn->color == RB_BLACK);
}

static uint64_t rb_check(pm_pool *pop, pm_oid map)
{
	struct rb_map *m = pm_direct(pop, map);
	struct rb_node *nil = pm_direct(pop, m->nil);
	if (nil == NULL || nil->color != RB_BLACK)
		die("rbtree: sentinel missing or not black");
	if (PM_OID_EQ(m->root, m->nil))
		return 0;
	if (((struct rb_node *)pm_direct(pop, m->root))->color != RB_BLACK)
		die("rbtree: root is red");
	struct rb_walk w = {.pop = pop, .nil = m->nil};
	walk_node(&w, m->root, m->nil, 0, 0, 0, 0, 0);
	return w.nodes;
}

static uint64_t rb_count(pm_pool *pop, pm_oid map)
{
	return ((struct rb_map *)pm_direct(pop, map))->count;
}

const struct map_ops rbtree_map_ops = {
	.name = "rbtree",
	.create = rb_create,
	.insert = rb_insert,
	.remove = rb_remove,
	.lookup = rb_lookup,
	.check = rb_check,
	.count = rb_count,
};
