/*
 * A hostile neighbour for tests/keyspace_events.rs: a module that subscribes
 * to the keyspace events of strings, sorted sets and generic commands and,
 * for keys starting with "evil:", changes the key from its callback, as
 * Redis 7.0 allows:
 *
 *   loadmodule evil.so del      DEL the key
 *   loadmodule evil.so rewrite  SET the key to a foreign string
 *   loadmodule evil.so expire   PEXPIRE the key in 1 ms
 *
 * Writes are replicated ("!"), so that a replica that holds exactly what the
 * master propagated stays identical. On servers with post-notification jobs
 * (7.2+), where writes inside the callback are discouraged, the write runs
 * as such a job instead; on 7.0 it runs inside the callback.
 *
 * Self-contained on purpose (no redismodule.h): it fetches the few API
 * functions it needs by name, as the header's RedisModule_Init does.
 */
#include <stddef.h>
#include <string.h>
#include <stdlib.h>

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef int (*NotifyFunc)(RedisModuleCtx *, int, const char *, RedisModuleString *);
typedef void (*PostJobFunc)(RedisModuleCtx *, void *);

static int (*GetApi)(const char *, void *);
static int (*SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*SubscribeToKeyspaceEvents)(RedisModuleCtx *, int, NotifyFunc);
static RedisModuleCallReply *(*Call)(RedisModuleCtx *, const char *, const char *, ...);
static void (*FreeCallReply)(RedisModuleCallReply *);
static const char *(*StringPtrLen)(const RedisModuleString *, size_t *);
static RedisModuleString *(*CreateString)(RedisModuleCtx *, const char *, size_t);
static void (*FreeString)(RedisModuleCtx *, RedisModuleString *);
static int (*AddPostNotificationJob)(RedisModuleCtx *, PostJobFunc, void *, void (*)(void *));

#define NOTIFY_GENERIC (1 << 2)
#define NOTIFY_STRING (1 << 3)
#define NOTIFY_ZSET (1 << 7)
#define NOTIFY_EXPIRED (1 << 8)

enum { MODE_DEL, MODE_REWRITE, MODE_EXPIRE };
static int mode = MODE_DEL;
static int busy = 0;

static void act(RedisModuleCtx *ctx, RedisModuleString *key) {
    RedisModuleCallReply *reply = NULL;
    busy = 1;
    switch (mode) {
    case MODE_DEL: reply = Call(ctx, "DEL", "!s", key); break;
    case MODE_REWRITE: reply = Call(ctx, "SET", "!sc", key, "not a limiter"); break;
    case MODE_EXPIRE: reply = Call(ctx, "PEXPIRE", "!sc", key, "1"); break;
    }
    busy = 0;
    if (reply) FreeCallReply(reply);
}

static void job(RedisModuleCtx *ctx, void *pd) {
    act(ctx, (RedisModuleString *)pd);
}

static void free_key(void *pd) {
    FreeString(NULL, (RedisModuleString *)pd);
}

static int on_event(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)type;
    size_t len = 0;
    const char *name = StringPtrLen(key, &len);
    if (busy || len < 5 || memcmp(name, "evil:", 5) != 0) return 0;
    /* Leave our own consequences alone (a DEL raises "del", …). */
    if (!strcmp(event, "del") || !strcmp(event, "expired") || !strcmp(event, "pexpire")) return 0;
    if (AddPostNotificationJob) {
        RedisModuleString *copy = CreateString(NULL, name, len);
        if (AddPostNotificationJob(ctx, job, copy, free_key) != 0) free_key(copy);
    } else {
        act(ctx, key);
    }
    return 0;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    GetApi = (int (*)(const char *, void *))(unsigned long)((void **)ctx)[0];
    if (GetApi("RedisModule_SetModuleAttribs", (void *)&SetModuleAttribs) ||
        GetApi("RedisModule_SubscribeToKeyspaceEvents", (void *)&SubscribeToKeyspaceEvents) ||
        GetApi("RedisModule_Call", (void *)&Call) ||
        GetApi("RedisModule_FreeCallReply", (void *)&FreeCallReply) ||
        GetApi("RedisModule_StringPtrLen", (void *)&StringPtrLen) ||
        GetApi("RedisModule_CreateString", (void *)&CreateString) ||
        GetApi("RedisModule_FreeString", (void *)&FreeString))
        return 1;
    if (GetApi("RedisModule_AddPostNotificationJob", (void *)&AddPostNotificationJob))
        AddPostNotificationJob = NULL;
    SetModuleAttribs(ctx, "evil", 1, 1);
    if (argc >= 1) {
        size_t len = 0;
        const char *arg = StringPtrLen(argv[0], &len);
        if (len == 7 && !memcmp(arg, "rewrite", 7)) mode = MODE_REWRITE;
        else if (len == 6 && !memcmp(arg, "expire", 6)) mode = MODE_EXPIRE;
        else if (len == 3 && !memcmp(arg, "del", 3)) mode = MODE_DEL;
        else return 1;
    }
    return SubscribeToKeyspaceEvents(ctx, NOTIFY_GENERIC | NOTIFY_STRING | NOTIFY_ZSET | NOTIFY_EXPIRED, on_event);
}
