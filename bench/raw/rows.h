/* The telemetry rows the raw store baselines write: the same table and the
 * same values quad-telemetry stores for the events quad-bench sends
 * (time-ordered ids, three event names, small JSON props). */
#ifndef QUAD_BENCH_ROWS_H
#define QUAD_BENCH_ROWS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

/* quad-telemetry's events table (Telemetry.migrations). */
#define EVENTS_TABLE_SQL \
    "CREATE TABLE events (" \
    " id TEXT PRIMARY KEY, seq BIGINT NOT NULL, phone TEXT NOT NULL, user_id TEXT, session TEXT NOT NULL," \
    " name TEXT NOT NULL, ts BIGINT NOT NULL, offline INTEGER NOT NULL, queued_ms BIGINT, props TEXT NOT NULL," \
    " digest TEXT NOT NULL, received_ms BIGINT NOT NULL);" \
    "CREATE UNIQUE INDEX events_seq ON events (seq);"

struct row {
    char id[48], phone[16], user[16], session[24], props[96], digest[17];
    const char *name;
    int64_t seq, ts, received_ms;
    int offline;
};

static inline int64_t wall_ms(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* FNV-1a 64 in hex, as quad-telemetry digests a payload. */
static inline void fnv_hex(const char *s, char out[17]) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    snprintf(out, 17, "%016" PRIx64, h);
}

/* Row k of a run that started at start_ms: a UUIDv7-shaped, time-ordered id. */
static inline void make_row(struct row *r, long k, int64_t start_ms, uint32_t run) {
    static const char *names[] = {"view.opened", "spot.search", "action.synced"};
    int64_t ms = start_ms + k / 50;
    snprintf(r->id, sizeof r->id, "%08" PRIx64 "-%04" PRIx64 "-7%03x-8%03x-%08x%04lx",
             (uint64_t)ms >> 16, (uint64_t)ms & 0xffff, (unsigned)(k & 0xfff), (unsigned)((k >> 12) & 0xfff), run, k & 0xffff);
    r->seq = k + 1;
    snprintf(r->phone, sizeof r->phone, "ph-%ld", k % 300);
    snprintf(r->user, sizeof r->user, "u-%ld", k % 250);
    snprintf(r->session, sizeof r->session, "s-%ld", k / 40);
    r->name = names[k % 3];
    r->ts = start_ms + k;
    r->offline = k % 2 == 0;
    if (k % 3 == 0) snprintf(r->props, sizeof r->props, "{\"view\":\"home\"}");
    else if (k % 3 == 1) snprintf(r->props, sizeof r->props, "{\"lot\":\"ML\"}");
    else snprintf(r->props, sizeof r->props, "{\"action\":\"reservations.checkin\",\"offline\":%s,\"waited_ms\":%ld}",
                  r->offline ? "true" : "false", k % 90000);
    fnv_hex(r->props, r->digest);
    r->received_ms = wall_ms();
}

#endif
