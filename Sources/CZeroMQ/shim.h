#pragma once
#include <zmq.h>

/// zmq_msg_t is an opaque 64-byte union; these keep its handling in C.
static inline int quad_zmq_errno(void) { return zmq_errno(); }
