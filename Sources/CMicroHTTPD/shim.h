#pragma once
// libmicrohttpd wants the socket types declared before its header.
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <microhttpd.h>

/// The access handler microhttpd calls for each request, on its own thread.
typedef enum MHD_Result (*quad_mhd_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                            const char *method, const char *version, const char *upload_data,
                                            size_t *upload_data_size, void **con_cls);

/// MHD_start_daemon is variadic, which Swift cannot call: starts a daemon
/// with its own polling thread, listening on IPv4 address `ip` and `port`
/// (0 for any free port). NULL when the address is bad or the port taken.
static inline struct MHD_Daemon *quad_mhd_start(const char *ip, uint16_t port, quad_mhd_handler handler, void *cls) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) return NULL;
    return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, port, NULL, NULL, handler, cls,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)64,
                            MHD_OPTION_END);
}

/// The port a daemon listens on (MHD_get_daemon_info is variadic too).
static inline uint16_t quad_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// MHD_NO, for a handler that refuses the connection.
static inline enum MHD_Result quad_mhd_no(void) { return MHD_NO; }

/// A request header, or NULL.
static inline const char *quad_mhd_header(struct MHD_Connection *connection, const char *key) {
    return MHD_lookup_connection_value(connection, MHD_HEADER_KIND, key);
}

/// A query-string argument, or NULL.
static inline const char *quad_mhd_argument(struct MHD_Connection *connection, const char *key) {
    return MHD_lookup_connection_value(connection, MHD_GET_ARGUMENT_KIND, key);
}

/// A response holding a copy of `size` bytes at `data`.
static inline struct MHD_Response *quad_mhd_response(size_t size, const void *data) {
    return MHD_create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
}
