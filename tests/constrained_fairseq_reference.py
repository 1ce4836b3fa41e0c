"""fairseq's constraint progress (its `token_generation_constraints`) in plain Python, one hypothesis at a time, for
checking `jaxnat.decoding.constrained_fairseq` against: a trie with per-node counters (unordered) and a position in
the concatenated phrases (ordered), written from fairseq 0.12.2's rules."""

from collections import Counter

import numpy as np


class Node:
    def __init__(self, token=None, parent=None):
        self.token, self.parent = token, parent
        self.children, self.terminal, self.count = {}, 0, 0


def build_trie(phrases):
    root = Node()
    for phrase in phrases:
        node = root
        for token in phrase:
            node = node.children.setdefault(token, Node(token, node))
        node.terminal += 1
        while node is not None:
            node.count += 1
            node = node.parent
    return root


class Unordered:
    def __init__(self, root, node=None, generated=None, completed=None):
        self.root, self.node = root, node or root
        self.generated, self.completed = Counter(generated or {}), Counter(completed or {})

    def moved(self, node):
        out = Unordered(self.root, node, self.generated, self.completed)
        if node is not self.root:
            out.generated[id(node)] += 1
        return out

    @property
    def bank(self):
        return sum(self.generated.values())

    @property
    def finished(self):
        node = self.node
        in_final = node.terminal and self.completed[id(node)] < node.terminal
        return self.root.count - sum(self.completed.values()) - bool(in_final) == 0

    def next_tokens(self):
        tokens = set(self.root.children)
        return tokens | set(self.node.children) if self.node is not self.root else tokens

    def advance(self, token):
        child = self.node.children.get(token)
        if child is not None and self.generated[id(child)] < child.count:
            return self.moved(child)
        if token in self.root.children:
            child = self.root.children[token]
            out = self.moved(child if self.generated[id(child)] < child.count else self.root)
        else:
            out = self.moved(self.root)
        node = self.node  # the path given back until a terminal node not completed yet
        while node is not self.root:
            if node.terminal and self.completed[id(node)] < node.terminal:
                out.completed[id(node)] += 1
                break
            out.generated[id(node)] -= 1
            node = node.parent
        return out


class Ordered:
    def __init__(self, phrases, state=-1):
        self.sequence = [t for p in phrases for t in p]
        self.endpoints = [i == len(p) - 1 for p in phrases for i in range(len(p))]
        self.phrases, self.state = phrases, state

    @property
    def bank(self):
        return self.state + 1

    @property
    def finished(self):
        return self.state + 1 == len(self.sequence)

    def next_tokens(self):
        tokens = {self.sequence[0]} if self.state > 0 else set()
        return tokens | ({self.sequence[self.state + 1]} if not self.finished else set())

    def advance(self, token):
        if self.finished:
            state = self.state
        elif self.sequence[self.state + 1] == token:
            state = self.state + 1
        elif self.endpoints[self.state]:  # state −1 reads the last entry, as Python's index does
            state = self.state
        elif token == self.sequence[0]:
            state = 0
        else:
            state = -1
        return Ordered(self.phrases, state)


def start(phrases, ordered):
    return Ordered(phrases) if ordered else Unordered(build_trie(phrases))


def keep_candidates(scores, parents, tokens, banks, distinct, keep):
    """The candidates a step keeps, in order (indices into the lists): sorted by −100 · (distinct − bank) + score,
    highest first; a (parent, token) pair equal to the one before it dropped; then dealt out by stripes: the
    j-th candidate of each run of equal banks before the (j+1)-th of any, a run of higher bank first."""
    key = [np.float32(-100.0 * (distinct - b)) + np.float32(s) for s, b in zip(scores, banks)]
    order = sorted(range(len(scores)), key=lambda i: (-key[i], i))
    kept = [i for n, i in enumerate(order)
            if n == 0 or (parents[i], tokens[i]) != (parents[order[n - 1]], tokens[order[n - 1]])]
    stripes, run = [], 0
    for n, i in enumerate(kept):
        run = run + 1 if n > 0 and banks[i] == banks[kept[n - 1]] else 0
        stripes.append(run * (len(kept) + 1) + distinct - banks[i])
    return [kept[n] for n in sorted(range(len(kept)), key=lambda n: (stripes[n], n))][:keep]
