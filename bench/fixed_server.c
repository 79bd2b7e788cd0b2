/* A preload for the counted matrix (bench/instr.py) that takes chance and the clock out of a server's
 * work, so that two runs count the same instructions:
 * - opening /dev/urandom opens the file FIXED_RANDOM_FILE instead: the dict hash seed (and every
 *   other random byte drawn from there) is the same in every run, and so are the collisions;
 * - srand and srandom seed with 1 (the server seeds them from the time and its pid): the skip list
 *   levels of sorted sets, drawn with random(), are the same in every run;
 * - gettimeofday returns FIXED_CLOCK_MS (Unix ms) if set: the clock stands still, so TIME, the times
 *   the scripts write and the numbers they format are the same in every run (printing a number costs
 *   instructions that depend on its digits). Timers use the monotonic clock, which runs on; keys
 *   never expire, which the counted workload does not need.
 * Built by bench/instr.py: cc -shared -fPIC -O2 -o fixed_server.so fixed_server.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

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
