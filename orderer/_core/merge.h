/* The k-way merge of the orderer's hot path (docs/ordering.md, "Merge and late fragments"): a
   loser tree over the popped prefixes of k source queues, in plain C so that it compiles
   branch-free. Used by merge.pyx through `cdef extern from "merge.h"`. */
#ifndef EVB_MERGE_H
#define EVB_MERGE_H

#include <Python.h>
#include <stdint.h>

/* Invariant checks, compiled in by building with EVB_DEBUG=1 (setup.py defines the macro);
   otherwise the compiler drops them. */
#ifndef EVB_DEBUG
#define EVB_DEBUG 0
#endif

/* Merge keys are timestamps; runs are numbered in source id order, so a tie on the
   timestamp goes to the lower run number: the order (timestamp, source id). An exhausted
   run has the key UINT64_MAX, which no fragment can carry. */
typedef uint64_t evb_key_t;
#define EVB_KEY_MAX UINT64_MAX

static inline int evb_beats(evb_key_t ka, Py_ssize_t a, evb_key_t kb, Py_ssize_t b) {
    return (ka < kb) | ((ka == kb) & (a < b));
}

/* Loser tree over k >= 1 runs: leaf of run r is node k + r, tree[n] the loser at node n;
   win[] (2k entries) is scratch for the winners while building. Returns the winner. */
static inline Py_ssize_t evb_build_tree(Py_ssize_t *tree, Py_ssize_t *win,
                                        const evb_key_t *key, Py_ssize_t k) {
    Py_ssize_t node, a, b;
    if (k == 1) return 0;
    for (node = 0; node < k; node++) win[k + node] = node;
    for (node = k - 1; node >= 1; node--) {
        a = win[2 * node]; b = win[2 * node + 1];
        if (evb_beats(key[b], b, key[a], a)) { win[node] = b; tree[node] = a; }
        else { win[node] = a; tree[node] = b; }
    }
    return win[1];
}

/* After the winner w advanced: replay its path to the root, branch-free. */
static inline Py_ssize_t evb_replay(Py_ssize_t *tree, const evb_key_t *key, Py_ssize_t w,
                                    Py_ssize_t k) {
    evb_key_t kw = key[w], kl, km;
    Py_ssize_t node = (w + k) >> 1, l, m;
    while (node) {
        l = tree[node];
        kl = key[l];
        /* all ones when the stored loser beats w; selections by mask stay branch-free */
        m = -(Py_ssize_t)evb_beats(kl, l, kw, w);
        km = (evb_key_t)m;
        tree[node] = l ^ ((w ^ l) & m);
        w = w ^ ((w ^ l) & m);
        kw = kw ^ ((kw ^ kl) & km);
        node >>= 1;
    }
    return w;
}

/* The winner w was emitted: step its run to the next fragment (cur[w] < end[w] on entry),
   key an exhausted run EVB_KEY_MAX, and return the new winner. */
static inline Py_ssize_t evb_advance(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                                     const Py_ssize_t *end, const uint64_t **tsp,
                                     Py_ssize_t w, Py_ssize_t k) {
    Py_ssize_t pos = cur[w] + 1;
    cur[w] = pos;
    key[w] = pos < end[w] ? tsp[w][pos] : EVB_KEY_MAX;
    return evb_replay(tree, key, w, k);
}

/* The common case of a merge: on-time fragments without payload. Writes timestamps and
   source ids of ``count`` fragments, and their arrival times when ``out_arrival`` is not NULL
   (a loop of its own: the extra loads would slow the other by a quarter); returns the new
   output length. */
static Py_ssize_t evb_merge_plain(Py_ssize_t *tree, evb_key_t *key, Py_ssize_t *cur,
                                  const Py_ssize_t *end, const uint64_t **tsp,
                                  const double **arrp, const uint32_t *ids, Py_ssize_t w,
                                  Py_ssize_t k, Py_ssize_t count, uint64_t *out_ts,
                                  uint32_t *out_source, double *out_arrival, Py_ssize_t n_out) {
    uint64_t *ots = out_ts + n_out;
    uint32_t *osrc = out_source + n_out;
    Py_ssize_t j;
    if (out_arrival != NULL) {
        double *oarr = out_arrival + n_out;
        for (j = 0; j < count; j++) {
            ots[j] = key[w];
            osrc[j] = ids[w];
            oarr[j] = arrp[w][cur[w]];
            w = evb_advance(tree, key, cur, end, tsp, w, k);
        }
        return n_out + count;
    }
    for (j = 0; j < count; j++) {
        ots[j] = key[w];
        osrc[j] = ids[w];
        w = evb_advance(tree, key, cur, end, tsp, w, k);
    }
    return n_out + count;
}

#endif /* EVB_MERGE_H */
