#pragma once
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a macro casting -1 to a function pointer, which Swift
/// cannot import; this hands it over as a value.
static inline sqlite3_destructor_type quad_sqlite_transient(void) { return SQLITE_TRANSIENT; }

/// sqlite3_config is variadic, which Swift cannot call. SQLITE_CONFIG_PAGECACHE
/// with no buffer and N pages: each connection's page cache allocates N
/// pages at once on its first read (Debian's default 20, ~87 KiB, whatever
/// cache_size is set to later: the pragma reads the schema first).
/// quad-edge sets 0: a phone's pages are allocated as they are read. Only
/// before the first connection opens; returns SQLITE_MISUSE after.
static inline int quad_sqlite_config_initial_cache_pages(int pages) { return sqlite3_config(SQLITE_CONFIG_PAGECACHE, (void *)0, 0, pages); }
