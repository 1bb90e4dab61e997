/* A fixed seed for redis-server's random bytes, for bench/gate.py.
 *
 * redis-server seeds its hash functions (the keyspace's and the command
 * table's dicts) from /dev/urandom at start, so each process walks different
 * hash chains: one server's SET costs 120 instructions more than another's.
 * Preloaded (LD_PRELOAD), this answers the server's one fopen of
 * /dev/urandom with a fixed 64-byte seed, so that every run hashes alike and
 * counts the same instructions. Only for the gate's throwaway servers. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static char seed[64] = "redis-ratelimit bench gate: one fixed seed, the same hash chains";

static FILE *open_seed(const char *path) {
    if (path != NULL && strcmp(path, "/dev/urandom") == 0) {
        return fmemopen(seed, sizeof seed, "r");
    }
    return NULL;
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    FILE *fp = open_seed(path);
    if (fp != NULL) return fp;
    if (real == NULL) real = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen");
    return real(path, mode);
}

FILE *fopen64(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    FILE *fp = open_seed(path);
    if (fp != NULL) return fp;
    if (real == NULL) real = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, "fopen64");
    return real(path, mode);
}
