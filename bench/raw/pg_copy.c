/* Raw PostgreSQL COPY of telemetry rows through libpq: quad-telemetry's
 * table, in a schema of its own, one COPY (one transaction) per batch.
 * Prints {"bench":"pg_copy","events_per_s":..}.
 * Usage: pg_copy -d CONNINFO [-n N] [-b BATCH] */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <libpq-fe.h>
#include "rows.h"

static PGconn *conn;

static void exec_ok(const char *sql) {
    PGresult *res = PQexec(conn, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "pg_copy: %s: %s", sql, PQerrorMessage(conn));
        exit(1);
    }
    PQclear(res);
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *conninfo = NULL;
    long n = 100000, batch = 500;
    int opt;
    if (argc > 1 && strcmp(argv[1], "--help") == 0) argv[1] = "-h";
    while ((opt = getopt(argc, argv, "d:n:b:h")) != -1) {
        switch (opt) {
        case 'd': conninfo = optarg; break;
        case 'n': n = atol(optarg); break;
        case 'b': batch = atol(optarg); break;
        case 'h':
            printf("Usage: pg_copy -d CONNINFO [-n N] [-b BATCH]\n"
                   "COPYs N telemetry rows into a fresh schema, BATCH rows per COPY.\n");
            return 0;
        default:
            fprintf(stderr, "Usage: pg_copy -d CONNINFO [-n N] [-b BATCH]\n");
            return 64;
        }
    }
    if (!conninfo || n <= 0 || batch <= 0) {
        fprintf(stderr, "pg_copy: -d CONNINFO is required, -n and -b must be > 0\n");
        return 64;
    }
    conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) { fprintf(stderr, "pg_copy: %s", PQerrorMessage(conn)); return 1; }
    char sql[512];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS raw_%d CASCADE; CREATE SCHEMA raw_%d; SET search_path = raw_%d", (int)getpid(), (int)getpid(), (int)getpid());
    exec_ok(sql);
    exec_ok(EVENTS_TABLE_SQL);
    int64_t start = wall_ms();
    uint32_t run = (uint32_t)getpid();
    struct row r;
    static char buf[1 << 20];
    uint64_t t0 = mono_ns();
    for (long k = 0; k < n;) {
        PGresult *res = PQexec(conn, "COPY events (id, seq, phone, user_id, session, name, ts, offline, queued_ms, props, digest, received_ms) FROM STDIN");
        if (PQresultStatus(res) != PGRES_COPY_IN) { fprintf(stderr, "pg_copy: COPY: %s", PQerrorMessage(conn)); return 1; }
        PQclear(res);
        size_t used = 0;
        for (long j = 0; j < batch && k < n; j++, k++) {
            make_row(&r, k, start, run);
            /* Text format: props hold no tab, newline or backslash. */
            int len = snprintf(buf + used, sizeof buf - used, "%s\t%" PRId64 "\t%s\t%s\t%s\t%s\t%" PRId64 "\t%d\t\\N\t%s\t%s\t%" PRId64 "\n",
                               r.id, r.seq, r.phone, r.user, r.session, r.name, r.ts, r.offline, r.props, r.digest, r.received_ms);
            used += (size_t)len;
            if (used > sizeof buf - 1024) {
                if (PQputCopyData(conn, buf, (int)used) != 1) { fprintf(stderr, "pg_copy: %s", PQerrorMessage(conn)); return 1; }
                used = 0;
            }
        }
        if (used && PQputCopyData(conn, buf, (int)used) != 1) { fprintf(stderr, "pg_copy: %s", PQerrorMessage(conn)); return 1; }
        if (PQputCopyEnd(conn, NULL) != 1) { fprintf(stderr, "pg_copy: %s", PQerrorMessage(conn)); return 1; }
        res = PQgetResult(conn);
        if (PQresultStatus(res) != PGRES_COMMAND_OK) { fprintf(stderr, "pg_copy: COPY end: %s", PQerrorMessage(conn)); return 1; }
        PQclear(res);
    }
    double seconds = (double)(mono_ns() - t0) / 1e9;
    snprintf(sql, sizeof sql, "DROP SCHEMA raw_%d CASCADE", (int)getpid());
    exec_ok(sql);
    PQfinish(conn);
    printf("{\"bench\":\"pg_copy\",\"events_per_s\":%.0f,\"n\":%ld,\"batch\":%ld}\n", (double)n / seconds, n, batch);
    return 0;
}
