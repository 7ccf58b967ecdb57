// The server test rig of tests/test_server_http.c, shared with the other server tests: start `flashdelta serve`
// on loopback with the fixture model (port 0, read back from --port-file), talk to it with curl, stop it (SIGTERM;
// it must exit 0, which under ASan means no leak).
#ifndef FD_TESTS_SERVER_RIG_H
#define FD_TESTS_SERVER_RIG_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SRV_MODEL "tests/data/fixtures/qwen35_dense_tied"
#define SRV_TOK "tests/data/server/tokenizer.json"

typedef struct {
    pid_t pid;
    int port;
    char dir[64];
    char log[128];
} srv_proc;

int srv_start(srv_proc *p, const char *extra);
int srv_start_model(srv_proc *p, const char *model, const char *tokenizer, const char *extra); // another model
int srv_stop(srv_proc *p); // the exit status (-1: killed or signalled)
// Runs body with a started server and stops the server afterwards, also when body leaves through ASSERT.
void with_server(const char *args, void (*body)(srv_proc *));
void with_server_model(const char *model, const char *tokenizer, const char *args, void (*body)(srv_proc *));
// One curl request: the HTTP status (-1 on failure), the body in *out (malloc'ed) when out is given.
int http(const srv_proc *p, const char *method, const char *path, const char *body, size_t len, const char *extra,
         char **out);
int http_json(const srv_proc *p, const char *path, const char *body, json_t **out);
int64_t metric(const srv_proc *p, const char *name_and_labels); // -1 if absent
// Runs tests/server/SCRIPT with node against the server (npm ci first if needed); env: extra VAR=value words.
void run_node(srv_proc *p, const char *script, const char *env);
#endif
