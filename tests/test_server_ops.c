// Operations of `flashdelta serve` beyond the OpenAI routes: scheduler limits from the configuration, CORS, IPv6
// listening, the vLLM-named metrics (tests/test_server_http.c has the rig).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server_rig.h"
#include "test.h"

// Past the scheduler's old fixed limits (--slots at most 256; arrays of 256 decoding slots and admitted jobs per
// step): 300 slots, 300 concurrent streams, each answer checked against `flashdelta generate`.
static void many_slots_body(srv_proc *p) {
    run_node(p, "load.mjs", "FD_CLIENTS=300 FD_REQUESTS=1 FD_TIME_LIMIT=240");
    EXPECT(metric(p, "flashdelta:num_requests_running{") == 0 && metric(p, "flashdelta:num_requests_waiting{") == 0);
    EXPECT(metric(p, "flashdelta:request_success_total{model_name=\"qwen35_dense_tied\",finished_reason=\"length\"}") +
                   metric(p, "flashdelta:request_success_total{model_name=\"qwen35_dense_tied\",finished_reason=\"stop\"}") ==
               300);
}
TEST(server_ops_300_slots_past_old_limits) {
    with_server("--ctx 256 --slots 300 --max-queue 400 --max-conns-per-ip 400 --http-threads 8", many_slots_body);
}
