// The server object shared by the libmicrohttpd callbacks (http.c) and the lifecycle code (server.c).
#ifndef FD_SERVER_HTTP_H
#define FD_SERVER_HTTP_H
#include "model/model.h"
#include "server/cors.h"
#include "server/server_internal.h"

typedef struct {
    const srv_config *cfg;
    struct MHD_Daemon *daemon;
    srv_sched *sched;
    tok_tokenizer *tok;
    chat_template *tpl; // the model's chat template (or the built-in one)
    srv_cors cors;      // --allowed-origins (off: no CORS headers)
    srv_metrics met;
    int32_t vocab;
    const char *model_name;
    long boot_time;
    uint64_t boot_nonce;
    atomic_long counter;
    atomic_int stopping;
} srv_server;

// Does the request carry key as its bearer token (Authorization: Bearer <key>)? Constant-time; NULL/"" never match.
// The admin routes use it with --admin-key; any other key (e.g. an API key) can be checked the same way.
int srv_request_has_key(struct MHD_Connection *c, const char *key);

enum MHD_Result srv_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls);
void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);
#endif
