/* SPDX-License-Identifier: MIT */
/*
 * DAG templates: the compiled form of a workflow version, executed by the runner. One template
 * per version, built once and shared read-only by every instance (and every thread) after
 * construction.
 *
 * DESIGN
 * - Nodes are numbered 0..n-1 in a deterministic order (source order, structural nodes such as
 *   joins and loop exits right after the block they close), so the same source always yields
 *   the same ids and persisted execution state stays valid when the DAG is rebuilt.
 * - Every node belongs to a frame: frame 0 is the entry function; each inlined helper call gets
 *   a frame of its own (its own variable scope). Names in expressions resolve in the frame of
 *   the node that evaluates them.
 * - Control edges are listed per node in evaluation order (guards of an if/elif in source
 *   order, handlers of an except in source order, fork branches in source order). Exception
 *   edges are the `exc` field of each node: where an error raised by that node goes (the EXCEPT
 *   node of the innermost enclosing try, the AGGREGATE of the enclosing spread/parallel branch,
 *   or IR_NO_NODE: the error fails the instance). An EXCEPT node's own `exc` is where an error
 *   that no handler matches is re-raised.
 * - Loops are plain nodes with marked back edges: for `for t in xs:` the compiler emits
 *   LOOP_INIT ($seqN, $iN = list(xs), 0) -> LOOP_COND ($iN < len($seqN)) -true-> LOOP_EXTRACT
 *   (t = $seqN[$iN]) -> body -> LOOP_INCR ($iN = $iN + 1) -back-> LOOP_COND -false-> LOOP_EXIT.
 *   `$` names cannot be written by users, so hidden loop state never clashes with variables.
 *
 * Node kinds (what the executor does):
 *   ENTRY       bind `targets` (input names) from the instance input; frame 0.
 *   OUTPUT      the instance is complete; its result is the value the last RETURN produced.
 *   ASSIGN      evaluate expr; bind targets (none: evaluate for effect; several: unpack a list).
 *   ACTION      dispatch action `name` with kwargs argnames[i] = argexprs[i]; bind targets to the
 *               result. retry/timeout policies attached. Inside a spread it runs once per item.
 *               With call RUN it starts the registered workflow `name` as a child instance
 *               (inputs = the kwargs) and binds its result; with call START it binds the
 *               child's id (a string) and continues at once.
 *   BRANCH      GUARD edges each carry a condition, tried in order; else the ELSE edge.
 *   JOIN        merge point; no work.
 *   LOOP_INIT, LOOP_EXTRACT, LOOP_INCR: assignments like ASSIGN (see above).
 *   LOOP_COND   evaluate expr; TRUE edge into the body, FALSE edge to LOOP_EXIT.
 *   LOOP_EXIT   merge point after a loop (cond false and every break).
 *   TRY         enters a try block; `link` is its EXCEPT node.
 *   EXCEPT      an error arrived: HANDLER edges in order, handlers[i] says which types match
 *               (none = all) and the name to bind the error to; no match: re-raise via `exc`.
 *   SPREAD      evaluate expr (the collection); run the FORK target (an ACTION) once per item
 *               with variable `name` bound to the item; `link` is the AGGREGATE.
 *   PARALLEL    start every FORK edge (index = branch number); `link` is the AGGREGATE.
 *   AGGREGATE   waits for every branch/item; binds targets (one: the list of results in order;
 *               several: unpacked); if any failed, raises the lowest-index error.
 *   SLEEP       durable sleep for expr seconds.
 *   RETURN      evaluate expr (or None) as the frame's return value; NEXT goes to OUTPUT or to
 *               the CALL_EXIT of the inlined helper.
 *   BREAK, CONTINUE: jump (to LOOP_EXIT; to LOOP_INCR, or LOOP_COND by a BACK edge for while).
 *   CALL_ENTER  evaluate argexprs in the caller's frame; open frame `callee_frame` with
 *               argnames bound; NEXT into the helper body. `link` is the CALL_EXIT.
 *   CALL_EXIT   close the callee frame; bind targets in the caller's frame to its return value.
 *   PUBLISH     evaluate expr and publish it as the instance's value `name` (latest wins),
 *               written with the step that ran it; continues at once.
 *   RAISE       raise an error along `exc`, never continue: with `name`, a new error of that
 *               type whose message, details and bases are argexprs "message" (a str),
 *               "details" and "bases" (a constant list of str); without, the error value expr
 *               gives (`raise e`, and a bare `raise`: the handler's hidden name).
 */
#ifndef IR_DAG_H
#define IR_DAG_H

#include <stdbool.h>
#include <stdint.h>

#include "ir/base/buf.h"
#include "ir/base/err.h"
#include "ir/expr.h"

#define IR_NO_NODE            UINT32_MAX
#define IR_DAG_FORMAT_VERSION 4

/* Default base delay for retries without `backoff:` (documented in docs/language.md). */
#define IR_DEFAULT_BACKOFF_MS 1000
/* Exponential backoff is capped here (factor 2, capped at 1h: docs/language.md "Policies"). */
#define IR_MAX_BACKOFF_MS (3600 * 1000)
/* Any duration written in a policy or a function's [timeout: D]: a year and a day. Longer is a
 * typo (a unit missing), and it keeps deadline arithmetic far from overflow. */
#define IR_MAX_POLICY_DURATION_MS (366LL * 24 * 3600 * 1000)
/* `multiplier:` of a retry policy, in thousandths: the default doubles the delay per retry;
 * 1.0 keeps it constant; 100 is plenty for any schedule a cap of 1h allows. */
#define IR_DEFAULT_BACKOFF_MULTIPLIER_MILLI 2000
#define IR_MIN_BACKOFF_MULTIPLIER_MILLI     1000
#define IR_MAX_BACKOFF_MULTIPLIER_MILLI     100000

#define IR_NODE_KINDS(X)            \
    X(ENTRY, "entry")               \
    X(OUTPUT, "output")             \
    X(ASSIGN, "assign")             \
    X(ACTION, "action")             \
    X(BRANCH, "branch")             \
    X(JOIN, "join")                 \
    X(LOOP_INIT, "loop_init")       \
    X(LOOP_COND, "loop_cond")       \
    X(LOOP_EXTRACT, "loop_extract") \
    X(LOOP_INCR, "loop_incr")       \
    X(LOOP_EXIT, "loop_exit")       \
    X(TRY, "try")                   \
    X(EXCEPT, "except")             \
    X(SPREAD, "spread")             \
    X(PARALLEL, "parallel")         \
    X(AGGREGATE, "aggregate")       \
    X(SLEEP, "sleep")               \
    X(RETURN, "return")             \
    X(BREAK, "break")               \
    X(CONTINUE, "continue")         \
    X(CALL_ENTER, "call_enter")     \
    X(CALL_EXIT, "call_exit")       \
    X(PUBLISH, "publish")           \
    X(RAISE, "raise")

#define IR_NODE_ENUM(id, text) IR_N_##id,
enum ir_node_kind { IR_NODE_KINDS(IR_NODE_ENUM) IR_N_COUNT_ };
#undef IR_NODE_ENUM

#define IR_EDGE_KINDS(X)  \
    X(NEXT, "next")       \
    X(GUARD, "guard")     \
    X(ELSE, "else")       \
    X(TRUE, "true")       \
    X(FALSE, "false")     \
    X(BACK, "back")       \
    X(HANDLER, "handler") \
    X(FORK, "fork")

#define IR_EDGE_ENUM(id, text) IR_E_##id,
enum ir_edge_kind { IR_EDGE_KINDS(IR_EDGE_ENUM) IR_E_COUNT_ };
#undef IR_EDGE_ENUM

/* What an ACTION node calls: an action on a worker, a registered workflow as a child instance
 * (`run wf(...)` waits for its result; `start wf(...)` continues at once with the child's id),
 * the outside world (`wait a, b` takes the next signal of one of those names sent to the
 * instance; `wait event e [key: k]` the next event e published under key k), or another
 * instance (`signal s(to=id, payload=v)` sends it signal s, in the write that records the call),
 * or a child it started (`wait for id` gives that child's result, raising its error as `run`
 * does; its one kwarg, `child`, is the id; its name is empty, and it has no policy).
 * X(ENUM, text); the numbers are stored in the DAG format: append only.
 *
 * A wait node's `name` is its signal names joined by ',' (names cannot hold one), or the event's
 * name; its kwargs are `key` (EVENT) and `default` (the value on timeout, when given); its
 * `timeout_ms` the durable timeout ([timeout: D]; 0: none). A signal node's `name` is the
 * signal's; its kwargs `to` and, when given, `payload`; it has no policy. */
#define IR_CALL_KINDS(X)   \
    X(ACTION, "action")    \
    X(RUN, "run")          \
    X(START, "start")      \
    X(WAIT, "wait")        \
    X(EVENT, "wait event") \
    X(SIGNAL, "signal")    \
    X(JOIN, "wait for")

#define IR_CALL_ENUM(id, text) IR_CALL_##id,
enum ir_call_kind { IR_CALL_KINDS(IR_CALL_ENUM) IR_CALL_COUNT_ };
#undef IR_CALL_ENUM

/* The most signal names one `wait` takes, and the longest name (of a signal or an event). */
#define IR_MAX_WAIT_NAMES 16
#define IR_MAX_WAIT_NAME  128

/* True when names is a wait node's name: signal names joined by ',' (at most IR_MAX_WAIT_NAMES),
 * or with event one name. */
bool ir_wait_names_ok(const char *names, bool event);

/* A signal sent to another instance (`signal s(to=id)`): done by storage, never a worker. */
static inline bool
ir_call_is_send(int call)
{
    return call == IR_CALL_SIGNAL;
}

/* A child workflow call (`run`, `start`). */
static inline bool
ir_call_is_child(int call)
{
    return call == IR_CALL_RUN || call == IR_CALL_START;
}

/* A wait for the outside world (`wait`, `wait event`): answered by storage, never a worker. */
static inline bool
ir_call_is_wait(int call)
{
    return call == IR_CALL_WAIT || call == IR_CALL_EVENT;
}

struct ir_edge {
    uint32_t from;
    uint32_t to;
    uint8_t kind;   /* enum ir_edge_kind */
    uint32_t expr;  /* GUARD: the condition; else IR_NO_EXPR */
    uint32_t index; /* HANDLER: handler number; FORK: branch number; else 0 */
};

struct ir_retry {
    const char **types; /* empty: any error but the runner's attempt timeout (docs/language.md) */
    uint32_t ntypes;
    int64_t retries;
    int64_t backoff_ms;
    int64_t max_backoff_ms;   /* at most IR_MAX_BACKOFF_MS */
    int64_t multiplier_milli; /* IR_MIN_.. to IR_MAX_BACKOFF_MULTIPLIER_MILLI */
    int64_t max_elapsed_ms;   /* no retry once this long has passed since the first attempt was
                                 dispatched; 0 = no bound */
};

struct ir_handler_info {
    const char **types; /* empty: catches everything */
    uint32_t ntypes;
    const char *bind; /* NULL: no `as` */
};

struct ir_frame {
    const char *func;   /* function whose body runs in this frame */
    uint32_t parent;    /* caller's frame; IR_NO_NODE for frame 0 */
    uint32_t call_node; /* its CALL_ENTER; IR_NO_NODE for frame 0 */
};

struct ir_node {
    uint8_t kind;        /* enum ir_node_kind */
    uint8_t call;        /* ACTION: enum ir_call_kind */
    uint16_t try_depth;  /* enclosing try blocks (across inlined calls) */
    uint16_t loop_depth; /* enclosing loops in this frame */
    uint32_t frame;
    uint32_t line, col;    /* source position of the statement */
    uint32_t exc;          /* exception edge target, or IR_NO_NODE */
    uint32_t expr;         /* see the kinds above; IR_NO_EXPR when unused */
    uint32_t link;         /* partner node (see kinds); IR_NO_NODE when unused */
    uint32_t callee_frame; /* CALL_ENTER */
    const char *name;      /* ACTION: action name ("mod.action"), or the child workflow's name
                              (call RUN/START); SPREAD: item variable; CALL_*: helper */
    const char *version;   /* ACTION RUN/START: the pinned workflow version ([version: "v"]);
                              NULL: the newest registered when the child starts */
    const char **targets;
    uint32_t ntargets;
    bool unpack; /* the targets unpack the value, even one (`a, = x`); always when several */
    const char **argnames; /* ACTION kwargs, CALL_ENTER parameters */
    uint32_t *argexprs;
    uint32_t nargs;
    struct ir_retry *retries; /* ACTION */
    uint32_t nretries;
    int64_t timeout_ms;  /* ACTION: start to close, per attempt; 0 = the runner's default */
    int64_t deadline_ms; /* ACTION: schedule to close, per attempt ([deadline: D]); 0 = none */
    bool fail_fast;      /* SPREAD, PARALLEL and their AGGREGATE: the first failed branch
                            cancels the others and is raised at once */
    struct ir_handler_info *handlers; /* EXCEPT */
    uint32_t nhandlers;
    uint32_t first_edge, nedges; /* outgoing edges: dag->edges[first_edge .. +nedges) */
};

struct ir_dag {
    struct cn_arena *arena; /* every string and array below */
    struct ir_xpool exprs;
    const char *entry_func;
    struct ir_node *nodes;
    uint32_t nnodes;
    struct ir_edge *edges; /* sorted by `from`, then evaluation order */
    uint32_t nedges;
    struct ir_frame *frames;
    uint32_t nframes;
    uint32_t entry;       /* the ENTRY node */
    uint32_t output;      /* the OUTPUT node */
    int64_t timeout_ms;   /* the entry function's [timeout: D]: an instance's default deadline,
                             counted from when it is due; 0 = none */
    const char *workflow; /* the registered workflow this compiles, set (in the arena) by
                             whoever loads a version, for workflow_name(); NULL: none */
    /* The entry's typed inputs (ast.h; in the arena, one per ENTRY target) when compiled from
     * source; NULL when none is typed or the graph was decoded (the ENTRY node's name holds
     * their JSON Schema either way). */
    const struct ir_param *entry_params;
};

/* Frees the template. NULL is a no-op. */
void ir_dag_free(struct ir_dag *d);

const char *ir_node_kind_name(enum ir_node_kind k);
/* Whether n is the hidden handler of a finally block (the compiler's: one catch-all clause
 * binding $finN, a name no source can write), and whether d has any: a cancel or a timeout of
 * one of its instances runs those blocks first (docs/semantics.md). */
bool ir_node_is_finally(const struct ir_node *n);
bool ir_dag_has_finally(const struct ir_dag *d);
const char *ir_edge_kind_name(enum ir_edge_kind k);

/* Serializes d to msgpack (format IR_DAG_FORMAT_VERSION). Returns CN_OK or CN_NOMEM. */
CN_MUST_CHECK cn_err ir_dag_encode(const struct ir_dag *d, struct cn_buf *out);

/* Decodes a serialized template and validates it (every index in range, edge lists sorted,
 * expression trees within limits), so a corrupt cache entry is an error, never a crash.
 * Returns CN_OK, CN_VERSION, CN_PARSE, CN_DEPTH, CN_RANGE or CN_NOMEM; err says what. */
CN_MUST_CHECK cn_err ir_dag_decode(const void *buf, size_t len, struct ir_dag **out,
                                   struct cn_errmsg *err);

/* Checks the structural promises the executor relies on: each node kind's edges (guards then
 * else, true then false, handlers and forks in order), links between partner nodes, names,
 * expressions and frames, and that exception edges end at an except or aggregate node.
 * ir_dag_decode calls it; compiled templates always pass. Returns CN_OK or CN_RANGE. */
CN_MUST_CHECK cn_err ir_dag_validate(const struct ir_dag *d, struct cn_errmsg *err);

/* Appends the canonical text form (stable; used for golden tests and `cairnctl dag`). */
CN_MUST_CHECK cn_err ir_dag_text(const struct ir_dag *d, struct cn_buf *out);

/* Appends a Graphviz DOT rendering: control edges solid, exception edges dashed, loop back
 * edges bold and labelled "back". */
CN_MUST_CHECK cn_err ir_dag_dot(const struct ir_dag *d, struct cn_buf *out);

/* A one-paragraph summary: node counts by kind, actions, frames, edges. */
CN_MUST_CHECK cn_err ir_dag_summary(const struct ir_dag *d, struct cn_buf *out);

#endif
