"""The iteration order of ``java.util.HashMap<Long, V>``: it decides the entry order of producer snapshots.

A model of OpenJDK 17's HashMap, as far as order goes: the table (16 slots, doubled when the size passes
0.75 x its length), each bucket's linked list (new keys appended; a resize splits a list into two that
keep their relative order), and the red-black "tree bins" a bucket becomes when a 9th key arrives in a
table of 64 slots or more (below 64 the table is doubled instead).  A tree bin keeps a linked list too,
and that list is what iteration follows: ``treeify`` keeps the list order but moves the tree's root to the
front, ``putTreeVal`` links a new key right after its tree parent, and a resize splits the list as for
plain buckets (a half of 6 keys or fewer becomes a plain list again, a larger half is treeified anew
unless the other half is empty).  Keys compare by their spread hash, then as longs.
"""

from __future__ import annotations

from collections.abc import Iterable

_INITIAL_CAPACITY = 16
_TREEIFY_THRESHOLD = 8  # a bin holding this many nodes gets a 9th => treeifyBin
_MIN_TREEIFY_CAPACITY = 64  # below this, treeifyBin resizes the table instead
_UNTREEIFY_THRESHOLD = 6


def java_long_hash(key: int) -> int:
    """HashMap.hash(Long): ``Long.hashCode`` spread by ``h ^ (h >>> 16)``, as an unsigned 32-bit value."""
    u = key & 0xFFFFFFFFFFFFFFFF
    h = (u ^ (u >> 32)) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _signed32(h: int) -> int:
    return h - (1 << 32) if h >= 1 << 31 else h


class _Node:
    __slots__ = ("key", "hash", "left", "right", "parent", "red")

    def __init__(self, key: int):
        self.key = key
        self.hash = _signed32(java_long_hash(key))
        self.left: _Node | None = None
        self.right: _Node | None = None
        self.parent: _Node | None = None
        self.red = False


def _goes_left(x: _Node, p: _Node) -> bool:
    """TreeNode's search order: hash, then Long.compareTo (keys are distinct)."""
    if p.hash != x.hash:
        return p.hash > x.hash
    return p.key > x.key


class _TreeBin:
    """One tree bin: the red-black tree plus the linked-list order that iteration follows."""

    def __init__(self, keys: list[int]):
        self.order: list[int] = []
        self.nodes: dict[int, _Node] = {}
        self.root: _Node | None = None
        for k in keys:  # TreeNode.treeify: insert in list order
            self._insert(_Node(k))
            self.order.append(k)
        self._move_root_to_front()

    def _insert(self, x: _Node) -> _Node:
        self.nodes[x.key] = x
        if self.root is None:
            self.root = x
            return x
        p = self.root
        while True:
            left = _goes_left(x, p)
            child = p.left if left else p.right
            if child is None:
                x.parent = p
                if left:
                    p.left = x
                else:
                    p.right = x
                self.root = _balance_insertion(self.root, x)
                return p
            p = child

    def _move_root_to_front(self) -> None:
        assert self.root is not None
        self.order.remove(self.root.key)
        self.order.insert(0, self.root.key)

    def put(self, key: int) -> None:
        """TreeNode.putTreeVal: the new node is linked right after its tree parent."""
        parent = self._insert(_Node(key))
        self.order.insert(self.order.index(parent.key) + 1, key)
        self._move_root_to_front()


_OTHER = {"left": "right", "right": "left"}


def _rotate(root: _Node, p: _Node, up: str) -> _Node:
    """TreeNode.rotateLeft (``up`` = "right": p's right child takes p's place) or rotateRight (``up`` =
    "left"); returns the tree's root."""
    down = _OTHER[up]
    c = getattr(p, up)
    if c is None:
        return root
    inner = getattr(c, down)
    setattr(p, up, inner)
    if inner is not None:
        inner.parent = p
    c.parent = pp = p.parent
    if pp is None:
        root = c
        c.red = False
    elif pp.left is p:
        pp.left = c
    else:
        pp.right = c
    setattr(c, down, p)
    p.parent = c
    return root


def _balance_insertion(root: _Node, x: _Node) -> _Node:
    """TreeNode.balanceInsertion, step for step (the root it returns decides the list's head).  Kafka's
    code has one branch for a parent that is a left child and its mirror image; ``side`` is the parent's
    side here, ``other`` the uncle's."""
    x.red = True
    while True:
        xp = x.parent
        if xp is None:
            x.red = False
            return x
        xpp = xp.parent
        if not xp.red or xpp is None:
            return root
        side = "left" if xp is xpp.left else "right"
        other = _OTHER[side]
        uncle = getattr(xpp, other)
        if uncle is not None and uncle.red:
            uncle.red = False
            xp.red = False
            xpp.red = True
            x = xpp
            continue
        if x is getattr(xp, other):
            x = xp
            root = _rotate(root, x, up=other)
            xp = x.parent
            xpp = xp.parent if xp is not None else None
        if xp is not None:
            xp.red = False
            if xpp is not None:
                xpp.red = True
                root = _rotate(root, xpp, up=side)


class JavaLongHashMap:
    """Keys of a ``HashMap<Long, V>`` and the order in which the map iterates them."""

    def __init__(self) -> None:
        self.capacity = _INITIAL_CAPACITY
        self._size = 0
        self._lists: dict[int, list[int]] = {}  # plain buckets: their linked lists
        self._trees: dict[int, _TreeBin] = {}  # tree bins

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        b = self._bucket(key)
        tree = self._trees.get(b)
        return key in tree.nodes if tree is not None else key in self._lists.get(b, ())

    @property
    def tree_bins(self) -> set[int]:
        return set(self._trees)

    def _bucket(self, key: int) -> int:
        return java_long_hash(key) & (self.capacity - 1)

    def put(self, key: int) -> None:
        """HashMap.put: a new key at the tail of its plain bucket or into its tree bin, then a resize past the
        threshold; a key already there stays where it is."""
        if self._add(key, False) and self._size > self.capacity * 3 // 4:
            self._resize()

    def compute_if_absent(self, key: int) -> None:
        """HashMap.computeIfAbsent(key, f) with f giving a value (Kafka's ``loadProducersFromRecords`` builds its
        map so).  It differs from put: it resizes first, when the size already passed the threshold (even for
        a key that is there); a new key goes to the head of a plain bucket, not its tail; and the bucket is
        treeified when it held 7 keys before, not 8."""
        if self._size > self.capacity * 3 // 4:
            self._resize()
        self._add(key, True)

    def _add(self, key: int, head: bool) -> bool:
        """A new key into its tree bin (putTreeVal), or at the tail (put) or the head (computeIfAbsent) of its
        plain bucket, treeified when the keys walked past reach TREEIFY_THRESHOLD - 1: put walks past all but
        the last (8 before), computeIfAbsent all of them (7 before).  False: the key is there already."""
        b = self._bucket(key)
        tree = self._trees.get(b)
        if tree is not None:
            if key in tree.nodes:
                return False
            tree.put(key)
        else:
            keys = self._lists.get(b)
            if keys is None:
                self._lists[b] = [key]
            elif key in keys:
                return False
            else:
                if head:
                    keys.insert(0, key)
                else:
                    keys.append(key)
                if len(keys) > _TREEIFY_THRESHOLD - head:
                    self._treeify_bin(b)
        self._size += 1
        return True

    def _treeify_bin(self, b: int) -> None:
        """HashMap.treeifyBin: a table shorter than 64 is doubled instead."""
        if self.capacity < _MIN_TREEIFY_CAPACITY:
            self._resize()
        else:
            self._trees[b] = _TreeBin(self._lists.pop(b))

    def remove(self, key: int) -> None:
        """HashMap.remove for keys of plain buckets (tree-bin removal is not modelled)."""
        b = self._bucket(key)
        if b in self._trees:
            raise NotImplementedError("removing a key from a HashMap tree bin is not modelled")
        keys = self._lists.get(b)
        if keys and key in keys:
            keys.remove(key)
            self._size -= 1

    def clear(self) -> None:
        """HashMap.clear: every bucket emptied, the table keeps its length."""
        self._lists.clear()
        self._trees.clear()
        self._size = 0

    def _resize(self) -> None:
        old = self.capacity
        self.capacity *= 2
        lists: dict[int, list[int]] = {}
        trees: dict[int, _TreeBin] = {}
        for keys in self._lists.values():
            for k in keys:
                lists.setdefault(self._bucket(k), []).append(k)
        for b, tree in self._trees.items():  # TreeNode.split
            lo = [k for k in tree.order if not java_long_hash(k) & old]
            hi = [k for k in tree.order if java_long_hash(k) & old]
            for index, half, other in ((b, lo, hi), (b + old, hi, lo)):
                if not half:
                    continue
                if len(half) <= _UNTREEIFY_THRESHOLD:
                    lists[index] = half
                elif other:
                    trees[index] = _TreeBin(half)
                else:
                    trees[index] = tree  # the whole bin moved: same tree, same list
        self._lists, self._trees = lists, trees

    def order(self) -> list[int]:
        """Iteration order: buckets ascending, each bucket's linked list in order."""
        out: list[int] = []
        for b in sorted(self._lists.keys() | self._trees.keys()):
            out.extend(self._trees[b].order if b in self._trees else self._lists[b])
        return out


def computed_hashmap_order(keys_in_insertion_order: Iterable[int]) -> list[int]:
    """The order in which a new HashMap iterates ``keys`` entered with computeIfAbsent, in this order."""
    m = JavaLongHashMap()
    for k in keys_in_insertion_order:
        m.compute_if_absent(k)
    return m.order()


def java_hashmap_order(keys_in_insertion_order: Iterable[int],
                       capacity: int | None = None) -> list[int]:
    """The order in which a HashMap into which ``keys`` were put (in this order) iterates them.

    With ``capacity``, the table length of a map that held more keys before some were removed
    (plain buckets only)."""
    keys = list(dict.fromkeys(keys_in_insertion_order))
    if capacity is None:
        m = JavaLongHashMap()
        for k in keys:
            m.put(k)
        return m.order()
    return [k for _, _, k in sorted((java_long_hash(k) & (capacity - 1), i, k) for i, k in enumerate(keys))]
