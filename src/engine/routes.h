// The route table of an engine: its own routes (GDN prefill / decode) plus the backend's. Selection by name,
// from the environment, combination checks, printing, hit counts and the check that the counted routes are the
// selected ones.
#ifndef FD_ROUTES_H
#define FD_ROUTES_H
#include <stdio.h>

#include "engine/engine.h"

#define FD_MAX_ROUTES 16

// Every route of the engine and its backend; returns the count.
int routes_list(fd_engine *e, fd_route **out);
fd_route *routes_find(fd_engine *e, const char *name);
// "NAME=VALUE"; returns 0 or -1 with a message listing the names or values that exist.
int routes_set(fd_engine *e, const char *spec);
// FD_ROUTE_<NAME> (upper case) for every route that has one set. Both this and routes_backend_preset first refuse
// the retired names (routes_refuse_retired_env).
int routes_from_env(fd_engine *e);
// -1 with a message naming the replacement when a retired route variable (FD_CUDA_GEMM_ACT, ...) is set, else 0.
int routes_refuse_retired_env(void);
// Applies the environment and the NAME=VALUE specs that name backend routes, before any cache exists (the kv
// layout is fixed once a cache is sized). The engine's routes are set later with routes_set.
int routes_backend_preset(fd_backend *be, const char *const *specs, int n_specs);
// Impossible combinations (the backend's check).
int routes_check(fd_engine *e);
void routes_print(fd_engine *e, FILE *f);      // one line: name=value [alternatives]
void routes_print_hits(fd_engine *e, FILE *f); // per route and value: calls, tokens
// Every call of a route counted under its selected value, except the calls a route takes by shape
// (route->by_shape). Returns 0, or -1 naming the route that ran something else.
int routes_verify(fd_engine *e);
void routes_count(fd_route *r, int value, int64_t tokens);
#endif
