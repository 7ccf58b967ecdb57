// Operational routes and API-key authentication (http_api.c), called by http.c.
#ifndef FD_SERVER_HTTP_API_H
#define FD_SERVER_HTTP_API_H
#include <jansson.h>

#include "server/http.h"

// --api-key: 0 when the request may go on, else -1 + e (401). authorization: the header's value or NULL.
int srv_auth_check(const srv_server *S, const char *url, const char *authorization, srv_err *e);
json_t *srv_model_json(const srv_server *S);                                     // one /v1/models entry
int srv_model_by_id(const srv_server *S, const char *id, json_t **out, srv_err *e); // GET /v1/models/{id}
json_t *srv_version_json(void);                                                   // GET /version
int srv_tokenize(const srv_server *S, const char *body, size_t len, json_t **out, srv_err *e);
int srv_detokenize(const srv_server *S, const char *body, size_t len, json_t **out, srv_err *e);
#endif
