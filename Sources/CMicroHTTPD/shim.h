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

/// Called when a request ends, finished or not: frees what the handler
/// kept in `*con_cls` (a sign-in form being uploaded).
typedef void (*quad_mhd_completed)(void *cls, struct MHD_Connection *connection, void **con_cls,
                                   enum MHD_RequestTerminationCode toe);

/// What bounds the server, so one client cannot hold it.
struct quad_mhd_limits {
    /// Open connections in all (MHD_OPTION_CONNECTION_LIMIT).
    unsigned int connections;
    /// Open connections from one client address (MHD_OPTION_PER_IP_CONNECTION_LIMIT).
    unsigned int connections_per_address;
    /// Seconds a connection may stay idle (MHD_OPTION_CONNECTION_TIMEOUT).
    unsigned int timeout_seconds;
};

/// A thread per connection, each waiting with poll(): on select() (the
/// default) libmicrohttpd cannot listen or serve on a descriptor past
/// FD_SETSIZE (1023), and a process holding many (a broker of a thousand
/// phones, a catalog beside many sockets) would refuse every request.
#define QUAD_MHD_FLAGS (MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL)

/// MHD_start_daemon is variadic, which Swift cannot call: starts a daemon
/// with a thread per connection (a sign-in waits on accounts without
/// holding other clients), listening on IPv4 address `ip` and `port` (0 for
/// any free port), within `limits`; with `tls_key` and `tls_cert` (PEM
/// text, both or neither) it speaks HTTPS. NULL when the address is bad,
/// the port taken or the key unusable. No MHD_USE_ERROR_LOG: refused
/// connections would each write a line, and a stranger could fill the log.
static inline struct MHD_Daemon *quad_mhd_start(const char *ip, uint16_t port, quad_mhd_handler handler, void *cls,
                                                struct quad_mhd_limits limits, quad_mhd_completed completed,
                                                const char *tls_key, const char *tls_cert) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) return NULL;
    unsigned int flags = QUAD_MHD_FLAGS;
    if (tls_key && tls_cert) {
        return MHD_start_daemon(flags | MHD_USE_TLS, port, NULL, NULL, handler, cls,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                MHD_OPTION_CONNECTION_TIMEOUT, limits.timeout_seconds,
                                MHD_OPTION_CONNECTION_LIMIT, limits.connections,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.connections_per_address,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                                MHD_OPTION_HTTPS_MEM_KEY, tls_key,
                                MHD_OPTION_HTTPS_MEM_CERT, tls_cert,
                                MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, port, NULL, NULL, handler, cls,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_CONNECTION_TIMEOUT, limits.timeout_seconds,
                            MHD_OPTION_CONNECTION_LIMIT, limits.connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.connections_per_address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                            MHD_OPTION_END);
}

/// Whether this libmicrohttpd was built with TLS.
static inline int quad_mhd_has_tls(void) { return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES; }

/// The client's IPv4 address as text into `out` (16 bytes); 0 when unknown.
static inline int quad_mhd_client_address(struct MHD_Connection *connection, char *out, size_t size) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr || info->client_addr->sa_family != AF_INET) return 0;
    return inet_ntop(AF_INET, &((const struct sockaddr_in *)info->client_addr)->sin_addr, out, (socklen_t)size) != NULL;
}

/// MHD_YES, for a handler that wants the next piece of an upload.
static inline enum MHD_Result quad_mhd_yes(void) { return MHD_YES; }

/// The port a daemon listens on (MHD_get_daemon_info is variadic too).
static inline uint16_t quad_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// The connections the daemon holds now, accepted and not yet closed.
static inline unsigned int quad_mhd_connections(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
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

/// quad_mhd_start without TLS, on a port several processes may share
/// (SO_REUSEPORT through MHD_OPTION_LISTENING_ADDRESS_REUSE): every worker
/// of a service serves on the one port and the kernel spreads the
/// connections among them.
static inline struct MHD_Daemon *quad_mhd_start_shared(const char *ip, uint16_t port, quad_mhd_handler handler, void *cls,
                                                       struct quad_mhd_limits limits, quad_mhd_completed completed) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    if (inet_pton(AF_INET, ip, &addr.sin_addr) != 1) return NULL;
    return MHD_start_daemon(QUAD_MHD_FLAGS, port, NULL, NULL, handler, cls,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned int)1,
                            MHD_OPTION_CONNECTION_TIMEOUT, limits.timeout_seconds,
                            MHD_OPTION_CONNECTION_LIMIT, limits.connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.connections_per_address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                            MHD_OPTION_END);
}
