/*
 * topdown_region.h: TopDown of a region of code from C and C++, the same API as the Rust
 * `topdown_user::region` module (RDPMC of the slots and PERF_METRICS counters, as Linux's
 * Documentation/topdown.txt describes). Build the library with
 *
 *     cargo build --release -p topdown-user --example topdown_region
 *
 * and link target/release/examples/libtopdown_region.so (-ltopdown_region).
 *
 *     topdown_region *r = topdown_region_open();
 *     if (!r) { fprintf(stderr, "%s\n", topdown_last_error()); return 1; }
 *     topdown_region_start(r);
 *     ... the code to measure ...
 *     topdown_fractions f;
 *     if (topdown_region_stop(r, &f) == 0) printf("retiring %.1f %%\n", 100 * f.retiring);
 *     topdown_region_close(r);
 *
 * Every function returns 0 (or a non-NULL pointer) on success; on failure -1 (or NULL), and
 * topdown_last_error() says why in one line (for the calling thread, until its next call).
 * A region is per thread: open, start and stop it on the same thread.
 */
#ifndef TOPDOWN_REGION_H
#define TOPDOWN_REGION_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fractions of the region's pipeline slots (0..1). Level 2 fields are NaN when level is 1. */
typedef struct topdown_fractions {
    double retiring, bad_speculation, frontend_bound, backend_bound;
    double heavy_operations, light_operations;
    double branch_mispredicts, machine_clears;
    double fetch_latency, fetch_bandwidth;
    double memory_bound, core_bound;
    int level;            /* 1, or 2 on Sapphire Rapids and later */
    uint64_t slots;       /* the slots the fractions are of */
    double uncertainty;   /* bound on each fraction's error from the 8-bit metrics */
} topdown_fractions;

typedef struct topdown_region topdown_region;

/* Opens the slots + metrics group for the calling thread (NULL: see topdown_last_error). */
topdown_region *topdown_region_open(void);
/* Marks the start of the region. */
int topdown_region_start(topdown_region *region);
/* The fractions since topdown_region_start (a region too short to give them is an error). */
int topdown_region_stop(topdown_region *region, topdown_fractions *out);
/* Resets the counters (PERF_EVENT_IOC_RESET); start does it when 2 s have passed. */
int topdown_region_reset(topdown_region *region);
/* Closes the group and frees the region (NULL is ignored). */
void topdown_region_close(topdown_region *region);

/* Decodes one logged reading: the fractions since the last reset. */
int topdown_decode_reading(uint64_t slots, uint64_t metrics, int level, topdown_fractions *out);
/* Decodes two logged readings: the region between them (pmc_width: the slots counter's bits). */
int topdown_decode_region(uint64_t slots_a, uint64_t metrics_a, uint64_t slots_b,
                          uint64_t metrics_b, unsigned pmc_width, int level,
                          topdown_fractions *out);

/* Why the last call of this thread failed ("" when it did not). */
const char *topdown_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
