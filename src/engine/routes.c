// Route table (see routes.h).
#include "engine/routes.h"

#include "engine/engine_tp.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

int routes_list(fd_engine *e, fd_route **out) {
    if (e->tp) e = engine_tp_rank(e, 0); // a tensor-parallel leader's routes are rank 0's (the others follow them)
    int n = 0;
    for (int i = 0; i < FD_ENGINE_ROUTES && n < FD_MAX_ROUTES; i++) out[n++] = &e->routes[i];
    for (int i = 0; i < e->be->n_routes && n < FD_MAX_ROUTES; i++) out[n++] = &e->be->routes[i];
    return n;
}

fd_route *routes_find(fd_engine *e, const char *name) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    for (int i = 0; i < n; i++)
        if (!strcmp(r[i]->name, name)) return r[i];
    return NULL;
}

static void names(fd_engine *e, char *buf, size_t cap) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", r[i]->name);
}

static void values(const fd_route *r, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = 0;
    for (int v = 0; r->values[v] && used < cap; v++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", v ? " | " : "", r->values[v]);
}

static int select_value(fd_route *r, const char *value, const char *from) {
    for (int v = 0; r->values[v]; v++)
        if (!strcmp(r->values[v], value)) {
            if (r->locked && v != *r->sel)
                return fd_error_set("%s: route %s is fixed at '%s' once caches exist (choose it before they are made)",
                                    from, r->name, r->values[*r->sel]);
            *r->sel = v;
            return 0;
        }
    char buf[256];
    values(r, buf, sizeof buf);
    // The help says why a route offers fewer values here (e.g. graphs under --trace or on the cpu backend).
    return fd_error_set("%s: route %s has no value '%s' (values: %s; %s: %s)", from, r->name, value, buf, r->name,
                        r->help ? r->help : "");
}

int routes_set(fd_engine *e, const char *spec) {
    const char *eq = strchr(spec, '=');
    char name[64], buf[512];
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof name)
        return fd_error_set("--route: '%s' is not NAME=VALUE", spec);
    memcpy(name, spec, (size_t)(eq - spec));
    name[eq - spec] = 0;
    fd_route *r = routes_find(e, name);
    if (!r) {
        names(e, buf, sizeof buf);
        return fd_error_set("--route: no route '%s' on this backend (routes: %s)", name, buf);
    }
    return select_value(r, eq + 1, "--route");
}

// Environment names that once selected a route or a kernel variant and no longer do. A setting that used to take
// effect is refused naming what replaces it, never silently ignored (a run would measure something other than
// what its command line says). The CUDA routes were also read as FD_CUDA_<NAME> until issue 14 left one name per
// route; the two variant knobs went with their kernels, and the gemv's k-slicing knob went because nothing needed
// it outside the sweep bench, which sets the value through fd_cuda_set_gemv_blocks_per_sm (docs/routes.md).
static const char *const k_retired_env[][2] = {
    {"FD_CUDA_GEMM_ACT", "FD_ROUTE_GEMM_ACT (or --route gemm_act=VALUE)"},
    {"FD_CUDA_ATTN", "FD_ROUTE_ATTN_KERNEL (or --route attn_kernel=VALUE)"},
    {"FD_CUDA_GEMM_SMALL", "FD_ROUTE_GEMM_SMALL (or --route gemm_small=VALUE)"},
    {"FD_CUDA_PDL", "FD_ROUTE_PDL (or --route pdl=VALUE)"},
    {"FD_CUDA_GEMM_FP8", "FD_ROUTE_GEMM_FP8 (or --route gemm_fp8=VALUE)"},
    {"FD_CUDA_GEMV_VARIANT", "nothing: the gemv's other load schedules were removed (docs/routes.md)"},
    {"FD_CUDA_GDN_SERIAL", "nothing: the first serial GDN kernel was removed (docs/routes.md)"},
    {"FD_CUDA_GEMV_BLOCKS_PER_SM", "nothing: the knob was removed; the gemv's k slicing is fixed at its measured best "
                                   "(2 blocks per SM; bench_cuda_gemv_sweep still sweeps it, docs/routes.md)"},
};

int routes_refuse_retired_env(void) {
    for (size_t i = 0; i < sizeof k_retired_env / sizeof k_retired_env[0]; i++)
        if (getenv(k_retired_env[i][0]))
            return fd_error_set("environment variable %s is no longer read; use %s", k_retired_env[i][0],
                                k_retired_env[i][1]);
    return 0;
}

static int from_env(fd_route **r, int n) {
    FD_TRY(routes_refuse_retired_env());
    for (int i = 0; i < n; i++) {
        char var[80] = "FD_ROUTE_";
        size_t k = strlen(var);
        for (const char *p = r[i]->name; *p && k + 1 < sizeof var; p++) var[k++] = (char)toupper((unsigned char)*p);
        var[k] = 0;
        const char *v = getenv(var);
        if (v && select_value(r[i], v, var)) return -1;
    }
    return 0;
}

int routes_from_env(fd_engine *e) {
    fd_route *r[FD_MAX_ROUTES];
    return from_env(r, routes_list(e, r));
}

int routes_backend_preset(fd_backend *be, const char *const *specs, int n_specs) {
    fd_route *r[FD_MAX_ROUTES];
    int n = 0;
    for (int i = 0; i < be->n_routes && n < FD_MAX_ROUTES; i++) r[n++] = &be->routes[i];
    if (from_env(r, n)) return -1;
    for (int k = 0; k < n_specs; k++) {
        const char *eq = strchr(specs[k], '=');
        if (!eq) continue; // malformed: routes_set reports it later
        for (int i = 0; i < n; i++)
            if (strlen(r[i]->name) == (size_t)(eq - specs[k]) && !strncmp(r[i]->name, specs[k], (size_t)(eq - specs[k])))
                FD_TRY(select_value(r[i], eq + 1, "--route"));
    }
    return 0;
}

int routes_check(fd_engine *e) { return e->be->check_routes ? e->be->check_routes(e->be) : 0; }

void routes_print(fd_engine *e, FILE *f) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    fprintf(f, "flashdelta: routes:");
    for (int i = 0; i < n; i++) {
        char buf[256];
        values(r[i], buf, sizeof buf);
        fprintf(f, " %s=%s [%s]", r[i]->name, r[i]->values[*r[i]->sel], buf);
    }
    fputc('\n', f);
}

// A value named "auto" chooses among the route's other values per call (FD_ROUTE_AUTO in backend.h).
static int route_is_auto(const fd_route *r) {
    return !strcmp(r->values[*r->sel], FD_ROUTE_AUTO);
}

void routes_print_hits(fd_engine *e, FILE *f) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    fprintf(f, "route hits (calls / tokens per implementation run):\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "  %-14s selected %-8s", r[i]->name, r[i]->values[*r[i]->sel]);
        for (int v = 0; r[i]->values[v]; v++)
            fprintf(f, "  %s %lld / %lld", r[i]->values[v], (long long)r[i]->calls[v], (long long)r[i]->tokens[v]);
        if (r[i]->by_shape) fprintf(f, "  (%s)", r[i]->by_shape);
        if (route_is_auto(r[i])) fprintf(f, "  (auto: each call counted under the value it ran)");
        fputc('\n', f);
    }
}

int routes_verify(fd_engine *e) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    for (int i = 0; i < n; i++) {
        if (r[i]->by_shape || route_is_auto(r[i])) continue;
        for (int v = 0; r[i]->values[v]; v++)
            if (v != *r[i]->sel && r[i]->calls[v])
                return fd_error_set("route %s: %lld calls ran '%s' although '%s' was selected", r[i]->name,
                                    (long long)r[i]->calls[v], r[i]->values[v], r[i]->values[*r[i]->sel]);
    }
    return 0;
}

void routes_count(fd_route *r, int value, int64_t tokens) {
    r->calls[value]++;
    r->tokens[value] += tokens;
}
