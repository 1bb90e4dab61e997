/*
 * A hostile neighbour for tests/keyspace_events.rs: a module that subscribes
 * to every class of keyspace events (REDISMODULE_NOTIFY_ALL: KEY_MISS
 * excluded) and, for keys starting with a prefix, changes the key from its
 * callback, as Redis 7.0 allows:
 *
 *   loadmodule evil.so <mode> [prefix]     (prefix: default "evil:")
 *
 *   del          DEL the key
 *   rewrite      a foreign value, in turn: ZADD a member that is not a log
 *                entry ("junk") scored 0 (the oldest), SET a string, ZADD
 *                "junk" scored +inf (the newest); a ZADD that meets a string
 *                (WRONGTYPE) SETs the string instead
 *   expire       PEXPIRE the key in 1 ms (it vanishes a little later)
 *   expire-past  PEXPIREAT the key in the past (it vanishes at once)
 *
 * It acts on every event our commands can raise; not on "expired" and
 * "evicted" (the server's, not a command's), nor on the events of its own
 * writes (a flag set while it writes). Writes are replicated ("!"), so that a
 * replica that holds exactly what the master propagated stays identical. On
 * servers with post-notification jobs (7.2+), where writes inside the
 * callback are not allowed, the write runs as such a job instead; on 7.0 it
 * runs inside the callback, the most hostile case.
 *
 * Commands, for the test:
 *   EVIL.PREFIX <prefix>   act on keys starting with <prefix> from now on
 *                          (a prefix no key has disarms the module)
 *   EVIL.ACTS              how many writes the module did so far
 *
 * Self-contained on purpose (no redismodule.h, no build-time path into the
 * cargo registry): it fetches the few API functions it needs by name, as the
 * header's RedisModule_Init does. Build: cc -shared -fPIC -O1 -o evil.so evil.c
 */
#include <stddef.h>
#include <string.h>

typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleString RedisModuleString;
typedef struct RedisModuleCallReply RedisModuleCallReply;
typedef int (*NotifyFunc)(RedisModuleCtx *, int, const char *, RedisModuleString *);
typedef int (*CmdFunc)(RedisModuleCtx *, RedisModuleString **, int);
typedef void (*PostJobFunc)(RedisModuleCtx *, void *);

#define OK 0
#define REPLY_ERROR 1 /* REDISMODULE_REPLY_ERROR */
/* REDISMODULE_NOTIFY_*, as in redismodule.h. */
#define NOTIFY_GENERIC (1 << 2)
#define NOTIFY_STRING (1 << 3)
#define NOTIFY_LIST (1 << 4)
#define NOTIFY_SET (1 << 5)
#define NOTIFY_HASH (1 << 6)
#define NOTIFY_ZSET (1 << 7)
#define NOTIFY_EXPIRED (1 << 8)
#define NOTIFY_EVICTED (1 << 9)
#define NOTIFY_STREAM (1 << 10)
#define NOTIFY_MODULE (1 << 13)
#define NOTIFY_ALL                                                                        \
    (NOTIFY_GENERIC | NOTIFY_STRING | NOTIFY_LIST | NOTIFY_SET | NOTIFY_HASH | NOTIFY_ZSET | \
     NOTIFY_EXPIRED | NOTIFY_EVICTED | NOTIFY_STREAM | NOTIFY_MODULE)

static int (*GetApi)(const char *, void *);
static int (*SetModuleAttribs)(RedisModuleCtx *, const char *, int, int);
static int (*CreateCommand)(RedisModuleCtx *, const char *, CmdFunc, const char *, int, int, int);
static int (*SubscribeToKeyspaceEvents)(RedisModuleCtx *, int, NotifyFunc);
static RedisModuleCallReply *(*Call)(RedisModuleCtx *, const char *, const char *, ...);
static void (*FreeCallReply)(RedisModuleCallReply *);
static int (*CallReplyType)(RedisModuleCallReply *);
static const char *(*StringPtrLen)(const RedisModuleString *, size_t *);
static RedisModuleString *(*CreateString)(RedisModuleCtx *, const char *, size_t);
static void (*FreeString)(RedisModuleCtx *, RedisModuleString *);
static int (*ReplyWithLongLong)(RedisModuleCtx *, long long);
static int (*ReplyWithSimpleString)(RedisModuleCtx *, const char *);
static int (*WrongArity)(RedisModuleCtx *);
/* 7.2+; NULL on 7.0. */
static int (*AddPostNotificationJob)(RedisModuleCtx *, PostJobFunc, void *, void (*)(void *));

enum { MODE_DEL, MODE_REWRITE, MODE_EXPIRE, MODE_EXPIRE_PAST };
static int mode = MODE_DEL;
static char prefix[128] = "evil:";
static size_t prefix_len = 5;
static int busy = 0;
static long long acts = 0;

static void act(RedisModuleCtx *ctx, RedisModuleString *key) {
    RedisModuleCallReply *reply = NULL;
    busy = 1;
    switch (mode) {
    case MODE_DEL: reply = Call(ctx, "DEL", "!s", key); break;
    case MODE_REWRITE:
        if (acts % 3 != 1) {
            reply = Call(ctx, "ZADD", "!scc", key, acts % 3 == 0 ? "0" : "+inf", "junk");
            if (reply && CallReplyType(reply) != REPLY_ERROR) break;
            if (reply) FreeCallReply(reply);
        }
        reply = Call(ctx, "SET", "!sc", key, "not a limiter");
        break;
    case MODE_EXPIRE: reply = Call(ctx, "PEXPIRE", "!sc", key, "1"); break;
    case MODE_EXPIRE_PAST: reply = Call(ctx, "PEXPIREAT", "!sc", key, "1"); break;
    }
    busy = 0;
    acts++;
    if (reply) FreeCallReply(reply);
}

static void run_job(RedisModuleCtx *ctx, void *pd) {
    act(ctx, (RedisModuleString *)pd);
}

static void free_job(void *pd) {
    FreeString(NULL, (RedisModuleString *)pd);
}

static int on_event(RedisModuleCtx *ctx, int type, const char *event, RedisModuleString *key) {
    (void)type;
    size_t len = 0;
    const char *name = StringPtrLen(key, &len);
    if (busy || len < prefix_len || memcmp(name, prefix, prefix_len) != 0) return 0;
    if (!strcmp(event, "expired") || !strcmp(event, "evicted")) return 0;
    if (AddPostNotificationJob) {
        RedisModuleString *copy = CreateString(NULL, name, len);
        if (AddPostNotificationJob(ctx, run_job, copy, free_job) != OK) free_job(copy);
    } else {
        act(ctx, key);
    }
    return 0;
}

static int cmd_prefix(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    size_t len = 0;
    if (argc != 2) return WrongArity(ctx);
    const char *p = StringPtrLen(argv[1], &len);
    if (len >= sizeof(prefix)) len = sizeof(prefix) - 1;
    memcpy(prefix, p, len);
    prefix[len] = '\0';
    prefix_len = len;
    return ReplyWithSimpleString(ctx, "OK");
}

static int cmd_acts(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    if (argc != 1) return WrongArity(ctx);
    return ReplyWithLongLong(ctx, acts);
}

static int arg_is(RedisModuleString *arg, const char *word) {
    size_t len = 0;
    const char *s = StringPtrLen(arg, &len);
    return len == strlen(word) && !memcmp(s, word, len);
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    /* What RedisModule_Init does: the first field of the context is the
     * server's GetApi. */
    GetApi = (int (*)(const char *, void *))(unsigned long)((void **)ctx)[0];
    if (GetApi("RedisModule_SetModuleAttribs", (void *)&SetModuleAttribs) != OK ||
        GetApi("RedisModule_CreateCommand", (void *)&CreateCommand) != OK ||
        GetApi("RedisModule_SubscribeToKeyspaceEvents", (void *)&SubscribeToKeyspaceEvents) != OK ||
        GetApi("RedisModule_Call", (void *)&Call) != OK ||
        GetApi("RedisModule_FreeCallReply", (void *)&FreeCallReply) != OK ||
        GetApi("RedisModule_CallReplyType", (void *)&CallReplyType) != OK ||
        GetApi("RedisModule_StringPtrLen", (void *)&StringPtrLen) != OK ||
        GetApi("RedisModule_CreateString", (void *)&CreateString) != OK ||
        GetApi("RedisModule_FreeString", (void *)&FreeString) != OK ||
        GetApi("RedisModule_ReplyWithLongLong", (void *)&ReplyWithLongLong) != OK ||
        GetApi("RedisModule_ReplyWithSimpleString", (void *)&ReplyWithSimpleString) != OK ||
        GetApi("RedisModule_WrongArity", (void *)&WrongArity) != OK)
        return 1;
    if (GetApi("RedisModule_AddPostNotificationJob", (void *)&AddPostNotificationJob) != OK)
        AddPostNotificationJob = NULL;
    SetModuleAttribs(ctx, "evil", 1, 1);
    if (argc >= 1) {
        if (arg_is(argv[0], "del")) mode = MODE_DEL;
        else if (arg_is(argv[0], "rewrite")) mode = MODE_REWRITE;
        else if (arg_is(argv[0], "expire")) mode = MODE_EXPIRE;
        else if (arg_is(argv[0], "expire-past")) mode = MODE_EXPIRE_PAST;
        else return 1;
    }
    if (argc >= 2) {
        size_t len = 0;
        const char *p = StringPtrLen(argv[1], &len);
        if (len >= sizeof(prefix)) return 1;
        memcpy(prefix, p, len);
        prefix[len] = '\0';
        prefix_len = len;
    }
    if (CreateCommand(ctx, "evil.prefix", cmd_prefix, "", 0, 0, 0) != OK ||
        CreateCommand(ctx, "evil.acts", cmd_acts, "", 0, 0, 0) != OK)
        return 1;
    return SubscribeToKeyspaceEvents(ctx, NOTIFY_ALL, on_event);
}
