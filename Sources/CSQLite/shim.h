#pragma once
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift
/// cannot import; this hands it over as a value.
static inline sqlite3_destructor_type quad_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// sqlite3_config is variadic, which Swift cannot call. SQLITE_CONFIG_PCACHE_INITSZ:
/// pages each connection's page cache allocates at once on its first read
/// (Debian's default 20, ~87 KiB, whatever cache_size is set to later: the
/// pragma reads the schema first). quad-edge sets 0: a phone's pages are
/// allocated as they are read. Before the first connection opens only;
/// returns SQLITE_MISUSE after.
static inline int quad_sqlite_config_pcache_initsz(int pages) { return sqlite3_config(SQLITE_CONFIG_PCACHE_INITSZ, 0, pages); }
