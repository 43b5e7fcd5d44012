/* SPDX-License-Identifier: MIT */
/* Prometheus text for /metrics (see metrics.h). */
#include "runner/ops/metrics.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Appends one Prometheus sample with its HELP and TYPE lines. */
static bool
metric(struct cn_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
    return cn_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                         (unsigned long long) v) == CN_OK;
}

/* Appends a latency histogram as a Prometheus summary: p50, p95, p99 and the max (quantile 1),
 * over the runner's life, within the histogram's 12.5% bucket error. */
static bool
summary(struct cn_buf *b, const char *name, const char *help, const struct rn_lathist *h)
{
    static const double qs[] = {0.5, 0.95, 0.99, 1.0};
    size_t i;

    if (cn_buf_printf(b, "# HELP %s %s\n# TYPE %s summary\n", name, help, name) != CN_OK) {
        return false;
    }
    for (i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        if (cn_buf_printf(b, "%s{quantile=\"%g\"} %.6f\n", name, qs[i],
                          (double) rn_lathist_quantile(h, qs[i]) / 1e6) != CN_OK) {
            return false;
        }
    }
    return cn_buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name, (double) h->sum_us / 1e6, name,
                         (unsigned long long) h->count) == CN_OK;
}

bool
rn_metrics_render_backfills(const struct rn_backfill_stat *bf, size_t n, struct cn_buf *b)
{
    static const char *const states[] = {"done", "failed", "running", "remaining"};
    size_t i, k;
    bool ok = true;

    if (n == 0) {
        return true;
    }
    ok = cn_buf_puts(b, "# HELP cairn_backfill_partitions Partitions of the active (and lately "
                        "finished) backfills, by state.\n"
                        "# TYPE cairn_backfill_partitions gauge\n") == CN_OK;
    for (i = 0; ok && i < n; i++) {
        const int64_t v[] = {bf[i].done, bf[i].failed, bf[i].running, bf[i].remaining};
        for (k = 0; ok && k < 4; k++) {
            /* ids are UUIDs and workflow names are [A-Za-z0-9_.-]: nothing to escape */
            ok = cn_buf_printf(b,
                               "cairn_backfill_partitions{backfill=\"%s\",workflow=\"%s\","
                               "state=\"%s\"} %lld\n",
                               bf[i].id, bf[i].workflow, states[k], (long long) v[k]) == CN_OK;
        }
    }
    return ok;
}

bool
rn_metrics_render_signals(const struct rn_signal_stat *s, struct cn_buf *b)
{
    return cn_buf_printf(
               b,
               "# HELP cairn_signals_sent_total Signals sent on this database (signal ids taken; "
               "a send that rolled back counts too).\n"
               "# TYPE cairn_signals_sent_total counter\ncairn_signals_sent_total %lld\n"
               "# HELP cairn_events_published_total Keyed events published on this database "
               "(event ids taken).\n"
               "# TYPE cairn_events_published_total counter\ncairn_events_published_total %lld\n"
               "# HELP cairn_signals_buffered Signals sent and not yet taken by a wait.\n"
               "# TYPE cairn_signals_buffered gauge\ncairn_signals_buffered %lld\n"
               "# HELP cairn_signal_oldest_buffered_seconds Age of the oldest signal not yet "
               "taken (0: none).\n"
               "# TYPE cairn_signal_oldest_buffered_seconds gauge\n"
               "cairn_signal_oldest_buffered_seconds %.3f\n"
               "# HELP cairn_waits Waits registered and not yet answered, by kind.\n"
               "# TYPE cairn_waits gauge\ncairn_waits{kind=\"signal\"} %lld\n"
               "cairn_waits{kind=\"event\"} %lld\n",
               (long long) s->sent, (long long) s->events, (long long) s->buffered,
               s->oldest_seconds, (long long) s->waits_signal, (long long) s->waits_event) == CN_OK;
}

/* The background jobs' runs and failed runs, one sample per job (ticker.h names them). */
static bool
render_jobs(const struct rn_runner_stats *st, struct cn_buf *b)
{
    static const struct {
        const char *name, *help;
        size_t off;
    } series[] = {
        {"cairn_job_runs_total", "Runs of each background job.",
         offsetof(struct rn_job_stat, runs)},
        {"cairn_job_failures_total",
         "Runs of each background job that failed (each backs off on its own).",
         offsetof(struct rn_job_stat, failures)},
    };
    size_t s, j;

    for (s = 0; s < sizeof(series) / sizeof(series[0]); s++) {
        if (cn_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", series[s].name, series[s].help,
                          series[s].name) != CN_OK) {
            return false;
        }
        for (j = 0; j < st->njobs; j++) {
            uint64_t v;
            memcpy(&v, (const char *) &st->jobs[j] + series[s].off, sizeof(v));
            if (cn_buf_printf(b, "%s{job=\"%s\"} %llu\n", series[s].name, st->jobs[j].name,
                              (unsigned long long) v) != CN_OK) {
                return false;
            }
        }
    }
    return true;
}

bool
rn_metrics_render(const struct rn_runner_stats *st, const struct rn_pool_stats *ps,
                  struct cn_buf *b)
{
    /* name, type, help, value: one row per sample. */
#define RN_SAMPLES(X)                                                                              \
    X("cairn_instances_claimed_total", "counter", "Instances claimed.", st->claimed)               \
    X("cairn_instances_completed_total", "counter", "Instances completed.", st->completed)         \
    X("cairn_instances_failed_total", "counter", "Instances failed or cancelled.", st->failed)     \
    X("cairn_instances_evicted_total", "counter", "Instances handed back while sleeping.",         \
      st->evicted)                                                                                 \
    X("cairn_leases_lost_total", "counter", "Instances evicted for a lost lease.", st->lost)       \
    X("cairn_instances_active", "gauge", "Instances held now.", st->active)                        \
    X("cairn_writes_total", "counter", "Instance writes committed.", st->writes)                   \
    X("cairn_write_batches_total", "counter", "Persist transactions committed.", st->batches)      \
    X("cairn_actions_dispatched_total", "counter", "Actions handed to the pool.", st->dispatched)  \
    X("cairn_pruned_instances_total", "counter", "Finished instances deleted by retention.",       \
      st->pruned)                                                                                  \
    X("cairn_pruned_actions_total", "counter", "Action results deleted by retention.",             \
      st->pruned_actions)                                                                          \
    X("cairn_pruned_events_total", "counter",                                                      \
      "Keyed events deleted by retention (none could be taken any more).", st->pruned_events)      \
    X("cairn_workers", "gauge", "Workers connected.", ps->workers)                                 \
    X("cairn_pool_queued", "gauge", "Attempts waiting for a worker.", ps->queued)                  \
    X("cairn_pool_backlog_cap", "gauge",                                                           \
      "Attempts that may wait for a worker before the runner stops claiming.", ps->backlog_cap)    \
    X("cairn_pool_sent_total", "counter", "Attempts sent to workers.", ps->dispatched)             \
    X("cairn_pool_dispatch_messages_total", "counter",                                             \
      "Dispatch messages that carried them (attempts per message: sent / messages).",              \
      ps->dispatch_msgs)                                                                           \
    X("cairn_pool_results_total", "counter", "Worker outcomes accepted.", ps->results)             \
    X("cairn_pool_stale_total", "counter", "Late or duplicate outcomes dropped.", ps->stale)       \
    X("cairn_pool_timeouts_total", "counter", "Attempts past their deadline.", ps->timeouts)       \
    X("cairn_pool_lost_total", "counter", "Attempts failed with WorkerLost.", ps->lost)            \
    X("cairn_pool_requeued_total", "counter", "Attempts of a dropped worker dispatched again.",    \
      ps->requeued)                                                                                \
    X("cairn_pool_withdrawn_total", "counter",                                                     \
      "Attempts withdrawn because their instance left this runner.", ps->withdrawn)                \
    X("cairn_pool_bad_messages_total", "counter",                                                  \
      "Worker connections dropped for a malformed message.", ps->bad_messages)                     \
    X("cairn_pool_silent_total", "counter", "Worker connections dropped for silence.", ps->silent) \
    X("cairn_pool_ungreeted_total", "counter",                                                     \
      "Connections dropped without a hello (too slow, or too many waiting).", ps->ungreeted)       \
    X("cairn_pool_connections", "gauge",                                                           \
      "Connections to the worker port open now, counted from their accept.", ps->connections)      \
    X("cairn_pool_greeting", "gauge", "Connections waiting to say hello now.", ps->greeting)       \
    X("cairn_pool_accept_paused_total", "counter",                                                 \
      "Times the worker port stopped accepting because the descriptor budget was spent.",          \
      ps->accept_paused)                                                                           \
    X("cairn_pool_dispatch_gated_total", "counter",                                                \
      "Dispatches held while the leases were not confirmed within a lease period.", ps->gated)     \
    X("cairn_http_connections", "gauge", "HTTP connections open.", st->http.connections)           \
    X("cairn_http_accepted_total", "counter", "HTTP connections accepted.", st->http.accepted)     \
    X("cairn_http_requests_total", "counter", "HTTP requests answered.", st->http.requests)        \
    X("cairn_http_header_timeouts_total", "counter",                                               \
      "HTTP connections closed because a request head came later than its timeout.",               \
      st->http.header_timeouts)                                                                    \
    X("cairn_http_evicted_total", "counter",                                                       \
      "HTTP connections waiting for a request closed for a newer one past the cap.",               \
      st->http.evicted)                                                                            \
    X("cairn_http_refused_total", "counter",                                                       \
      "HTTP connections closed at accept because the descriptor budget was spent.",                \
      st->http.refused)                                                                            \
    X("cairn_fd_budget", "gauge",                                                                  \
      "Connections the listeners may hold: the open-file limit less the runner's reserve.",        \
      st->fd_budget)                                                                               \
    X("cairn_fd_budget_used", "gauge", "Connections the listeners hold now.", st->fd_used)         \
    X("cairn_fd_budget_exhausted_total", "counter",                                                \
      "Connections a listener refused or did not accept because the budget was spent.",            \
      st->fd_exhausted)
#define RN_SAMPLE(name, type, help, v) ok = ok && metric(b, name, type, help, (uint64_t) (v));
    bool ok = true;

    RN_SAMPLES(RN_SAMPLE)
#undef RN_SAMPLE
#undef RN_SAMPLES
    return ok && render_jobs(st, b) &&
           summary(b, "cairn_persist_seconds",
                   "Duration of each committed persist transaction (the commit barrier's floor).",
                   &st->persist) &&
           summary(b, "cairn_action_seconds",
                   "From an action's dispatch to its outcome's arrival: the worker's run time plus "
                   "the transport.",
                   &ps->action_time) &&
           summary(b, "cairn_action_dispatch_delay_seconds",
                   "From an action becoming ready to its dispatch to a worker (commit barrier and "
                   "waiting for a worker).",
                   &ps->dispatch_delay);
}
