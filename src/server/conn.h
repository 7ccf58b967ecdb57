// Slow-client defence: every open connection is tracked from libmicrohttpd's connection notifications, and a
// watchdog thread cuts (shutdown(2)) any connection that has not delivered a whole request (headers and body)
// within --recv-timeout of its start (or of the end of its previous request, on a kept-alive connection).
// libmicrohttpd 0.9.75's own timeout only fires on idle connections, so a client sending one header byte every
// few seconds would otherwise hold its connection, and a place under the connection limit, for ever.
#ifndef FD_SERVER_CONN_H
#define FD_SERVER_CONN_H
#include <microhttpd.h>

typedef struct srv_conns srv_conns;

srv_conns *srv_conns_create(double recv_timeout);
// Stops the watchdog; call after MHD_stop_daemon (every connection is closed by then).
void srv_conns_free(srv_conns *t);
// MHD_OPTION_NOTIFY_CONNECTION callback (cls: the srv_conns).
void srv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                      enum MHD_ConnectionNotificationCode code);
// The connection's request has arrived whole: no deadline while it is answered (a generation may run long).
void srv_conns_request_received(struct MHD_Connection *c);
// The response is done: a kept-alive connection's next request gets a fresh deadline from now.
void srv_conns_request_done(struct MHD_Connection *c);
// Was this connection cut by the watchdog (its request too slow)? The request's log line then says 408.
int srv_conns_was_cut(struct MHD_Connection *c);
// Connections cut by the watchdog so far (for the log and the tests' metrics).
long srv_conns_cut_total(srv_conns *t);
#endif
