/* Raw SQLite batched INSERT of telemetry rows: quad-telemetry's table and
 * QuadStore's pragmas (WAL, synchronous=NORMAL), one prepared statement,
 * one transaction per batch. Prints {"bench":"sqlite_insert","events_per_s":..}.
 * Usage: sqlite_insert -f FILE [-n N] [-b BATCH] */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sqlite3.h>
#include "rows.h"

static void check(sqlite3 *db, int rc, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "sqlite_insert: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *file = NULL;
    long n = 100000, batch = 500;
    int opt;
    if (argc > 1 && strcmp(argv[1], "--help") == 0) argv[1] = "-h";
    while ((opt = getopt(argc, argv, "f:n:b:h")) != -1) {
        switch (opt) {
        case 'f': file = optarg; break;
        case 'n': n = atol(optarg); break;
        case 'b': batch = atol(optarg); break;
        case 'h':
            printf("Usage: sqlite_insert -f FILE [-n N] [-b BATCH]\n"
                   "Inserts N telemetry rows into a fresh FILE, BATCH rows per transaction.\n");
            return 0;
        default:
            fprintf(stderr, "Usage: sqlite_insert -f FILE [-n N] [-b BATCH]\n");
            return 64;
        }
    }
    if (!file || n <= 0 || batch <= 0) {
        fprintf(stderr, "sqlite_insert: -f FILE is required, -n and -b must be > 0\n");
        return 64;
    }
    char side[4096];
    unlink(file);
    snprintf(side, sizeof side, "%s-wal", file); unlink(side);
    snprintf(side, sizeof side, "%s-shm", file); unlink(side);
    sqlite3 *db;
    if (sqlite3_open(file, &db) != SQLITE_OK) { fprintf(stderr, "sqlite_insert: cannot open %s\n", file); return 1; }
    check(db, sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;", 0, 0, 0), "pragmas");
    check(db, sqlite3_exec(db, EVENTS_TABLE_SQL, 0, 0, 0), "create table");
    sqlite3_stmt *ins;
    check(db, sqlite3_prepare_v2(db, "INSERT INTO events (id, seq, phone, user_id, session, name, ts, offline, queued_ms, props, digest, received_ms)"
                                     " VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)", -1, &ins, 0), "prepare");
    int64_t start = wall_ms();
    uint32_t run = (uint32_t)getpid();
    struct row r;
    uint64_t t0 = mono_ns();
    for (long k = 0; k < n;) {
        check(db, sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0), "begin");
        for (long j = 0; j < batch && k < n; j++, k++) {
            make_row(&r, k, start, run);
            sqlite3_bind_text(ins, 1, r.id, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 2, r.seq);
            sqlite3_bind_text(ins, 3, r.phone, -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 4, r.user, -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 5, r.session, -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 6, r.name, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 7, r.ts);
            sqlite3_bind_int(ins, 8, r.offline);
            sqlite3_bind_text(ins, 9, r.props, -1, SQLITE_STATIC);
            sqlite3_bind_text(ins, 10, r.digest, -1, SQLITE_STATIC);
            sqlite3_bind_int64(ins, 11, r.received_ms);
            check(db, sqlite3_step(ins), "insert");
            sqlite3_reset(ins);
        }
        check(db, sqlite3_exec(db, "COMMIT", 0, 0, 0), "commit");
    }
    double seconds = (double)(mono_ns() - t0) / 1e9;
    sqlite3_finalize(ins);
    sqlite3_close(db);
    printf("{\"bench\":\"sqlite_insert\",\"events_per_s\":%.0f,\"n\":%ld,\"batch\":%ld}\n", (double)n / seconds, n, batch);
    return 0;
}
