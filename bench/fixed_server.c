/* A preload for the counted matrix (bench/instr.py) that takes chance and the clock out of a server's
 * work, so that two runs count the same instructions:
 * - opening /dev/urandom opens the file FIXED_RANDOM_FILE instead: the dict hash seed (and every
 *   other random byte drawn from there) is the same in every run, and so are the collisions;
 * - srand and srandom seed with 1 (the server seeds them from the time and its pid): the skip list
 *   levels of sorted sets, drawn with random(), are the same in every run;
 * - gettimeofday returns FIXED_CLOCK_MS (Unix ms) if set: the clock stands still, so TIME, the times
 *   the scripts write and the numbers they format are the same in every run (printing a number costs
 *   instructions that depend on its digits); keys never expire, which the counted workload does not
 *   need;
 * - clock_gettime's monotonic clocks stand still too (see below): serverCron never runs, and neither
 *   does anything else on a timer. The server then never acts on SIGTERM (serverCron does that):
 *   bench/instr.py kills it after its last dump.
 * Built by bench/instr.py: cc -shared -fPIC -O2 -o fixed_server.so fixed_server.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

typedef FILE *(*opener)(const char *, const char *);

static FILE *open_fixed(const char *name, const char *path, const char *mode) {
    opener real = (opener)dlsym(RTLD_NEXT, name);
    const char *fixed = getenv("FIXED_RANDOM_FILE");
    if (path && fixed && strcmp(path, "/dev/urandom") == 0) return real(fixed, mode);
    return real(path, mode);
}

FILE *fopen(const char *path, const char *mode) { return open_fixed("fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { return open_fixed("fopen64", path, mode); }

static void seed_fixed(const char *name, unsigned int seed) {
    void (*real)(unsigned int) = (void (*)(unsigned int))dlsym(RTLD_NEXT, name);
    real(getenv("FIXED_RANDOM_FILE") ? 1 : seed);
}

void srand(unsigned int seed) { seed_fixed("srand", seed); }
void srandom(unsigned int seed) { seed_fixed("srandom", seed); }

/* Read once: the server calls gettimeofday for every command, and its counts must not include a getenv. */
static long long fixed_ms = -1;
static int (*real_gettimeofday)(struct timeval *, void *);

int gettimeofday(struct timeval *tv, void *tz) {
    if (fixed_ms == -1) {
        const char *fixed = getenv("FIXED_CLOCK_MS");
        fixed_ms = fixed ? atoll(fixed) : -2;
        real_gettimeofday = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
    }
    if (fixed_ms >= 0) {
        tv->tv_sec = fixed_ms / 1000;
        tv->tv_usec = (fixed_ms % 1000) * 1000;
        return 0;
    }
    return real_gettimeofday(tv, tz);
}

/* The monotonic clock stands still too (at the fixed time) when FIXED_CLOCK_MS is set: the event
 * loop's timers never come due, so serverCron never runs. What it runs between the counted calls
 * decides by the wall clock (resizing the clients' query and reply buffers, sampling memory), and the
 * allocator's later work follows from what it freed and allocated: with it, two runs' allocator
 * counts differed by up to 15k instructions in 10M. Nothing the counted workload needs runs there. */
static int (*real_clock_gettime)(clockid_t, struct timespec *);

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (fixed_ms == -1) {
        struct timeval ignored;
        gettimeofday(&ignored, NULL);  /* reads FIXED_CLOCK_MS once */
    }
    if (!real_clock_gettime) real_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    if (fixed_ms >= 0 && (clock == CLOCK_MONOTONIC || clock == CLOCK_MONOTONIC_COARSE || clock == CLOCK_MONOTONIC_RAW)) {
        ts->tv_sec = fixed_ms / 1000;
        ts->tv_nsec = (fixed_ms % 1000) * 1000000;
        return 0;
    }
    return real_clock_gettime(clock, ts);
}
