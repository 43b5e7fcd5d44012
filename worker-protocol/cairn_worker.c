/* SPDX-License-Identifier: MIT */
/*
 * cairn-worker: the reference worker, built on the C SDK (include/cairn/worker.h). Serves the
 * built-in std.* actions (for tests, demos and smoke checks of a runner) and stops gracefully
 * on SIGTERM/SIGINT. With --exec-dir it also serves each executable in a directory as an
 * `exec.NAME` action. See docs/protocol.md, "Running workers".
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn/worker.h"
#include "ir/base/clock.h"
#include "ir/base/log.h"
#include "ir/base/notify.h"
#include "ir/base/opts.h"
#include "ir/base/uuid.h"
#include "ir/base/xalloc.h"
#include "ir/error.h"
#include "worker-protocol/proto.h"
#include "worker-protocol/std_actions.h"

#define STOP_GRACE_S  10 /* plain literal: the help text spells it */
#define STOP_GRACE_MS (STOP_GRACE_S * 1000)
#define STR_(x)       #x
#define STR(x)        STR_(x)
#define GRACE_TEXT    STR(STOP_GRACE_S)

/* ---- executables as actions (--exec-dir) --------------------------------------------------- */

/* DESIGN. An `exec.NAME` action runs DIR/NAME as a child process (fork + execv, no shell) in
 * its own process group: kwargs go to its stdin as JSON, its stdout (JSON) is the result, the
 * last EXEC_ERR_TAIL bytes of stderr go into error messages. One poll(2) loop serves all three
 * pipes (non-blocking on our side), so a child that fills stderr before reading stdin cannot
 * deadlock us. The loop wakes at least every EXEC_POLL_MS to check the deadline and
 * cancellation, and SIGKILLs the process group when either comes. The child is always reaped
 * and every pipe closed before the handler returns. SIGPIPE is ignored in this process (see
 * main) so a child that exits without reading stdin makes write() fail with EPIPE. */
#define EXEC_MAX_OUT  (16u * 1024 * 1024)
#define EXEC_ERR_TAIL 4096u
#define EXEC_POLL_MS  20
#define EXEC_PREFIX   "exec."

struct exec_action {
    char *name; /* "exec.NAME" */
    char *path; /* "DIR/NAME" */
};

struct exec_run {
    struct cn_buf out;           /* stdout */
    char err[2 * EXEC_ERR_TAIL]; /* stderr tail; only the last EXEC_ERR_TAIL bytes kept */
    size_t err_len;
    bool too_big; /* stdout over EXEC_MAX_OUT */
    bool deadline_hit, cancelled;
    int status; /* waitpid status */
};

/* A name part of an action name: an ASCII identifier (the language's NAME token). */
static bool
exec_name_ok(const char *s)
{
    size_t i;

    if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) {
        return false;
    }
    for (i = 1; s[i] != '\0'; i++) {
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || s[i] == '_' ||
              (s[i] >= '0' && s[i] <= '9'))) {
            return false;
        }
    }
    return i + strlen(EXEC_PREFIX) <= 256; /* WP_MAX_NAME */
}

static void
exec_close(int *fd)
{
    if (*fd >= 0) {
        (void) close(*fd);
        *fd = -1;
    }
}

static const char *
exec_signame(int sig)
{
    switch (sig) {
    case SIGKILL:
        return "SIGKILL";
    case SIGTERM:
        return "SIGTERM";
    case SIGSEGV:
        return "SIGSEGV";
    case SIGABRT:
        return "SIGABRT";
    case SIGINT:
        return "SIGINT";
    case SIGHUP:
        return "SIGHUP";
    case SIGPIPE:
        return "SIGPIPE";
    case SIGBUS:
        return "SIGBUS";
    case SIGFPE:
        return "SIGFPE";
    case SIGILL:
        return "SIGILL";
    case SIGQUIT:
        return "SIGQUIT";
    case SIGALRM:
        return "SIGALRM";
    case SIGUSR1:
        return "SIGUSR1";
    case SIGUSR2:
        return "SIGUSR2";
    default:
        return "a signal";
    }
}

/* The last EXEC_ERR_TAIL bytes of stderr without trailing white space, for messages. */
static const char *
exec_err_tail(const struct exec_run *r, int *len)
{
    size_t from = r->err_len > EXEC_ERR_TAIL ? r->err_len - EXEC_ERR_TAIL : 0, end = r->err_len;

    while (end > from && (r->err[end - 1] == '\n' || r->err[end - 1] == ' ' ||
                          r->err[end - 1] == '\r' || r->err[end - 1] == '\t')) {
        end--;
    }
    *len = (int) (end - from);
    return r->err + from;
}

/* Reads what is available on *fd into r (stdout when is_out, else the stderr tail). Closes
 * *fd at EOF. Returns CN_OK or CN_NOMEM; read errors other than EAGAIN/EINTR count as EOF. */
static cn_err
exec_drain(int *fd, bool is_out, struct exec_run *r)
{
    char chunk[16384];
    ssize_t n;

    for (;;) {
        n = read(*fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return CN_OK;
        }
        if (n <= 0) {
            exec_close(fd);
            return CN_OK;
        }
        if (!is_out) {
            /* Keep at least the last EXEC_ERR_TAIL bytes in a buffer twice that size. */
            if ((size_t) n >= EXEC_ERR_TAIL) {
                memcpy(r->err, chunk + (size_t) n - EXEC_ERR_TAIL, EXEC_ERR_TAIL);
                r->err_len = EXEC_ERR_TAIL;
                continue;
            }
            if (r->err_len + (size_t) n > sizeof(r->err)) {
                memmove(r->err, r->err + r->err_len - EXEC_ERR_TAIL, EXEC_ERR_TAIL);
                r->err_len = EXEC_ERR_TAIL;
            }
            memcpy(r->err + r->err_len, chunk, (size_t) n);
            r->err_len += (size_t) n;
            continue;
        }
        if (r->out.len + (size_t) n > EXEC_MAX_OUT) {
            r->too_big = true;
            exec_close(fd);
            return CN_OK;
        }
        if (cn_buf_append(&r->out, chunk, (size_t) n) != CN_OK) {
            return CN_NOMEM;
        }
    }
}

static pthread_mutex_t exec_fork_mtx = PTHREAD_MUTEX_INITIALIZER;

static void
exec_lock(void)
{
    if (pthread_mutex_lock(&exec_fork_mtx) != 0) {
        abort();
    }
}

static void
exec_unlock(void)
{
    if (pthread_mutex_unlock(&exec_fork_mtx) != 0) {
        abort();
    }
}

/* pipe() with FD_CLOEXEC on both ends (pipe2 is not POSIX). Call with exec_fork_mtx held. */
static int
exec_pipe(int p[2])
{
    if (pipe(p) != 0) {
        return -1;
    }
    if (fcntl(p[0], F_SETFD, FD_CLOEXEC) != 0 || fcntl(p[1], F_SETFD, FD_CLOEXEC) != 0) {
        (void) close(p[0]);
        (void) close(p[1]);
        p[0] = p[1] = -1;
        return -1;
    }
    return 0;
}

/* The attempt's context as the child's environment: the worker's own, without variables of
 * these names, then CAIRN_ACTION, CAIRN_INSTANCE_ID, CAIRN_EXEC_ID, CAIRN_ATTEMPT,
 * CAIRN_DEADLINE_MS (0: none) and CAIRN_LAST_ERROR (the previous attempt's error as JSON, empty
 * on the first). Built before the fork: the child may only call async-signal-safe functions.
 * NULL without memory; free it with exec_env_free. */
#define EXEC_ENV_OWN 6
static char **
exec_env(const struct cairn_worker_ctx *ctx)
{
    extern char **environ;
    static const char *const names[EXEC_ENV_OWN] = {
        "CAIRN_ACTION=",  "CAIRN_INSTANCE_ID=", "CAIRN_EXEC_ID=",
        "CAIRN_ATTEMPT=", "CAIRN_DEADLINE_MS=", "CAIRN_LAST_ERROR="};
    struct cn_buf last = CN_BUF_INIT;
    struct cn_errmsg em;
    char iid[37], xid[37], num[2][24];
    const char *vals[EXEC_ENV_OWN];
    size_t n = 0, k = 0, i, j;
    char **env;

    while (environ[n] != NULL) {
        n++;
    }
    if ((env = calloc(n + EXEC_ENV_OWN + 1, sizeof(*env))) == NULL) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        bool ours = false;
        for (j = 0; j < EXEC_ENV_OWN && !ours; j++) {
            ours = strncmp(environ[i], names[j], strlen(names[j])) == 0;
        }
        if (!ours) {
            env[k++] = environ[i];
        }
    }
    env[k] = NULL;
    cn_uuid_format(ctx->instance_id, iid);
    cn_uuid_format(ctx->exec_id, xid);
    (void) snprintf(num[0], sizeof(num[0]), "%" PRIu32, ctx->attempt);
    (void) snprintf(num[1], sizeof(num[1]), "%" PRId64, ctx->deadline_ms);
    if (ctx->last_error.type != IR_T_NULL && ir_val_to_json(ctx->last_error, &last, &em) != CN_OK) {
        cn_buf_clear(&last); /* not JSON (NaN in its details): left empty */
    }
    vals[0] = ctx->action;
    vals[1] = iid;
    vals[2] = xid;
    vals[3] = num[0];
    vals[4] = num[1];
    vals[5] = last.data != NULL ? last.data : "";
    for (j = 0; j < EXEC_ENV_OWN; j++) {
        size_t a = strlen(names[j]), b = strlen(vals[j]);
        char *s = malloc(a + b + 1);
        if (s == NULL) {
            break;
        }
        memcpy(s, names[j], a);
        memcpy(s + a, vals[j], b + 1);
        env[k + j] = s;
    }
    cn_buf_fini(&last);
    if (j < EXEC_ENV_OWN) {
        while (j-- > 0) {
            free(env[k + j]);
        }
        free(env);
        return NULL;
    }
    env[k + EXEC_ENV_OWN] = NULL;
    return env;
}

/* Frees what exec_env made (the worker's own entries are borrowed). */
static void
exec_env_free(char **env)
{
    size_t n = 0, j;

    if (env == NULL) {
        return;
    }
    while (env[n] != NULL) {
        n++;
    }
    for (j = 0; j < EXEC_ENV_OWN && j < n; j++) {
        free(env[n - 1 - j]);
    }
    free(env);
}

/* In the child between fork and exec: async-signal-safe calls only. Never returns. */
static void
exec_child(char *path, char **env, int in_fd, int out_fd, int err_fd, pid_t worker)
{
    static const char msg[] = "cairn-worker: exec failed\n";
    char *argv[2];
    sigset_t none;

    /* Dies with its worker, kill -9 included: its outcome could never be reported, and the
     * runner runs the attempt again elsewhere; left alive, the two would run side by side (the
     * chaos suite's worker-kill9 saw an orphan write after its worker was gone). The signal
     * comes when the forking thread ends: slot threads outlive their children. */
    (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != worker) {
        _exit(127); /* the worker died before the line above */
    }
    (void) setpgid(0, 0);
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) {
        _exit(127);
    }
    /* The worker blocks SIGTERM/SIGINT and ignores SIGPIPE; the child starts clean. */
    (void) signal(SIGPIPE, SIG_DFL);
    (void) sigemptyset(&none);
    (void) sigprocmask(SIG_SETMASK, &none, NULL);
    argv[0] = path;
    argv[1] = NULL;
    (void) execve(path, argv, env);
    (void) !write(2, msg, sizeof(msg) - 1);
    _exit(127);
}

/* Kills the child's process group, and the child itself in case setpgid lost against its exec. */
static void
exec_kill(pid_t pid)
{
    (void) kill(-pid, SIGKILL);
    (void) kill(pid, SIGKILL);
}

/* waitpid, again after EINTR. */
static pid_t
exec_waitpid(pid_t pid, int *status, int flags)
{
    pid_t w;

    do {
        w = waitpid(pid, status, flags);
    } while (w < 0 && errno == EINTR);
    return w;
}

/* Forks path with three new pipes as its stdin, stdout and stderr. Our ends are left open (and
 * non-blocking) in in_p[1], out_p[0] and err_p[0], the child's closed. Returns CN_OK, or CN_IO:
 * *pid is then -1, or the child that was started, killed already (reap it). */
static cn_err
exec_fork(char *path, char **env, int in_p[2], int out_p[2], int err_p[2], pid_t *pid)
{
    pid_t self = getpid();

    *pid = -1;
    /* Under exec_fork_mtx, so no other slot forks while our pipes lack FD_CLOEXEC (its child
     * would keep our stdin pipe open and ours would never see EOF). */
    exec_lock();
    if (exec_pipe(in_p) != 0 || exec_pipe(out_p) != 0 || exec_pipe(err_p) != 0) {
        exec_unlock();
        return CN_IO;
    }
    *pid = fork();
    if (*pid == 0) {
        exec_child(path, env, in_p[0], out_p[1], err_p[1], self);
    }
    exec_unlock();
    if (*pid < 0) {
        *pid = -1;
        return CN_IO;
    }
    (void) setpgid(*pid, *pid); /* also done by the child; whichever runs first wins */
    exec_close(&in_p[0]);
    exec_close(&out_p[1]);
    exec_close(&err_p[1]);
    if (fcntl(in_p[1], F_SETFL, O_NONBLOCK) != 0 || fcntl(out_p[0], F_SETFL, O_NONBLOCK) != 0 ||
        fcntl(err_p[0], F_SETFL, O_NONBLOCK) != 0) {
        exec_kill(*pid);
        return CN_IO;
    }
    return CN_OK;
}

/* Waits up to EXEC_POLL_MS (less when the deadline is nearer) for one of the pipes still open
 * to be ready. Returns false when poll failed. */
static bool
exec_poll(const struct cairn_worker_ctx *ctx, int64_t now, int in_fd, int out_fd, int err_fd)
{
    struct pollfd pfd[3];
    nfds_t n = 0;
    int timeout = EXEC_POLL_MS;

    if (ctx->deadline_ms > 0 && ctx->deadline_ms - now < timeout) {
        timeout = (int) (ctx->deadline_ms - now);
    }
    if (in_fd >= 0) {
        pfd[n++] = (struct pollfd){.fd = in_fd, .events = POLLOUT};
    }
    if (out_fd >= 0) {
        pfd[n++] = (struct pollfd){.fd = out_fd, .events = POLLIN};
    }
    if (err_fd >= 0) {
        pfd[n++] = (struct pollfd){.fd = err_fd, .events = POLLIN};
    }
    return poll(n > 0 ? pfd : NULL, n, timeout) >= 0 || errno == EINTR;
}

/* Writes to *fd what the pipe takes of input from *off on; closes *fd once all of it is
 * written or the child stopped reading. */
static void
exec_feed(int *fd, const struct cn_buf *input, size_t *off)
{
    ssize_t wn = write(*fd, input->data + *off, input->len - *off);

    if (wn > 0) {
        *off += (size_t) wn;
    }
    /* EPIPE: the child does not read its input; that is its business. */
    if (*off == input->len ||
        (wn < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        exec_close(fd);
    }
}

/* Feeds input to the child pid on *in_fd and drains *out_fd and *err_fd into r until it exits
 * (then *exited, reaped, r->status valid), the deadline passes or ctx is cancelled (then it is
 * killed). Returns CN_OK, CN_IO (poll failed) or CN_NOMEM; on an error it is killed too. */
static cn_err
exec_serve(const struct cairn_worker_ctx *ctx, pid_t pid, int *in_fd, int *out_fd, int *err_fd,
           const struct cn_buf *input, struct exec_run *r, bool *exited)
{
    size_t in_off = 0;
    bool killed = false;
    cn_err rv = CN_OK;

    while (rv == CN_OK && !killed && !*exited) {
        int64_t now = cn_wall_ms();

        if (cairn_worker_cancelled(ctx) || (ctx->deadline_ms > 0 && now >= ctx->deadline_ms)) {
            r->cancelled = cairn_worker_cancelled(ctx);
            r->deadline_hit = !r->cancelled;
            killed = true;
            exec_kill(pid);
            break;
        }
        if (!exec_poll(ctx, now, *in_fd, *out_fd, *err_fd)) {
            rv = CN_IO;
            break;
        }
        if (*in_fd >= 0) {
            exec_feed(in_fd, input, &in_off);
        }
        if (*out_fd >= 0 && (rv = exec_drain(out_fd, true, r)) != CN_OK) {
            break;
        }
        if (r->too_big) {
            killed = true;
            exec_kill(pid);
            break;
        }
        if (*err_fd >= 0 && (rv = exec_drain(err_fd, false, r)) != CN_OK) {
            break;
        }
        if (exec_waitpid(pid, &r->status, WNOHANG) == pid) {
            *exited = true;
            /* Everything the child wrote is in the pipes now; take it, but do not wait for
             * EOF (a grandchild may hold the pipes open). */
            if (*out_fd >= 0 && (rv = exec_drain(out_fd, true, r)) == CN_OK && *err_fd >= 0) {
                rv = exec_drain(err_fd, false, r);
            }
        }
    }
    if (rv != CN_OK && !*exited && !killed) {
        exec_kill(pid);
    }
    return rv;
}

/* Runs path with input on stdin until it exits, the deadline (wall ms, <= 0: none) passes or
 * ctx is cancelled. Fills r (r->out must be initialised). Returns CN_OK (r->status valid),
 * CN_IO (pipe/fork failed) or CN_NOMEM. */
static cn_err
exec_spawn(const struct cairn_worker_ctx *ctx, char *path, const struct cn_buf *input,
           struct exec_run *r)
{
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    bool exited = false;
    pid_t pid;
    cn_err rv;

    char **env = exec_env(ctx);

    if (env == NULL) {
        return CN_NOMEM;
    }
    rv = exec_fork(path, env, in_p, out_p, err_p, &pid);
    exec_env_free(env);
    if (rv == CN_OK) {
        if (input->len == 0) {
            exec_close(&in_p[1]);
        }
        rv = exec_serve(ctx, pid, &in_p[1], &out_p[0], &err_p[0], input, r, &exited);
    }
    if (pid > 0 && !exited) {
        (void) exec_waitpid(pid, &r->status, 0);
    }
    exec_close(&in_p[0]);
    exec_close(&in_p[1]);
    exec_close(&out_p[0]);
    exec_close(&out_p[1]);
    exec_close(&err_p[0]);
    exec_close(&err_p[1]);
    return rv;
}

/* An error value for a failed exit status: the child's own error JSON when stdout holds
 * {"type": str, ...}, else ExecError with the status and stderr's tail. */
static cn_err
exec_fail(const struct cairn_worker_ctx *ctx, const struct exec_run *r, int code,
          struct ir_val *out)
{
    struct ir_val v = ir_null(), bases = ir_null();
    struct cn_errmsg em;
    const struct ir_val *type, *msg, *b;
    const char *tail;
    int tail_len;
    cn_err rv;

    if (ir_val_from_json(r->out.data != NULL ? r->out.data : "", r->out.len, &v, &em) == CN_OK &&
        v.type == IR_T_MAP && (type = ir_map_get(v, "type", 4)) != NULL && type->type == IR_T_STR) {
        msg = ir_map_get(v, "message", 7);
        b = ir_map_get(v, "bases", 5);
        if (b != NULL && b->type == IR_T_LIST) {
            bases = ir_val_retain(*b);
        }
        rv = ir_error_new(ir_str_data(*type),
                          msg != NULL && msg->type == IR_T_STR ? ir_str_data(*msg) : "", bases,
                          ir_null(), out);
        if (rv == CN_TYPE) { /* bases not all strings: ignore them */
            rv = ir_error_new(ir_str_data(*type),
                              msg != NULL && msg->type == IR_T_STR ? ir_str_data(*msg) : "",
                              ir_null(), ir_null(), out);
        }
        ir_val_release(v);
        return rv;
    }
    ir_val_release(v);
    tail = exec_err_tail(r, &tail_len);
    rv = ir_raise(out, "ExecError", "%s: exited with status %d%s%.*s", ctx->action, code,
                  tail_len > 0 ? "; stderr: " : "", tail_len, tail);
    return rv == CN_RAISED ? CN_OK : rv;
}

static cn_err
act_exec(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct exec_action *a = arg;
    struct exec_run *r;
    struct cn_buf input = CN_BUF_INIT;
    struct cn_errmsg em;
    const char *tail;
    int tail_len;
    cn_err rv;

    if ((r = calloc(1, sizeof(*r))) == NULL) {
        return CN_NOMEM;
    }
    if ((rv = ir_val_to_json(kwargs, &input, &em)) != CN_OK) {
        if (rv != CN_NOMEM) {
            rv = ir_raise(out, "ValueError", "%s(): arguments are not JSON: %s", ctx->action,
                          em.text);
            rv = rv == CN_RAISED ? CN_OK : rv;
        }
        goto done;
    }
    if ((rv = exec_spawn(ctx, a->path, &input, r)) != CN_OK) {
        if (rv == CN_IO) {
            rv = ir_raise(out, "ExecError", "%s: could not start %s: %s", ctx->action, a->path,
                          strerror(errno));
            rv = rv == CN_RAISED ? CN_OK : rv;
        }
        goto done;
    }
    if (r->cancelled) {
        rv = cairn_worker_error_new("Cancelled", "cancelled; the process was killed", ir_null(),
                                    out);
    } else if (r->deadline_hit) {
        rv = ir_raise(out, "ExecError", "%s: killed (SIGKILL) at the dispatch deadline",
                      ctx->action);
    } else if (r->too_big) {
        rv = ir_raise(out, "ExecError", "%s: output larger than %u bytes; the process was killed",
                      ctx->action, EXEC_MAX_OUT);
    } else if (WIFSIGNALED(r->status)) {
        tail = exec_err_tail(r, &tail_len);
        rv = ir_raise(out, "ExecError", "%s: killed by signal %d (%s)%s%.*s", ctx->action,
                      WTERMSIG(r->status), exec_signame(WTERMSIG(r->status)),
                      tail_len > 0 ? "; stderr: " : "", tail_len, tail);
    } else if (WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0) {
        rv = ir_val_from_json(r->out.data != NULL ? r->out.data : "", r->out.len, out, &em);
        if (rv != CN_OK && rv != CN_NOMEM) {
            rv = ir_raise(out, "ExecError", "%s: exited 0 but its output was not JSON: %s",
                          ctx->action, em.text);
        }
    } else {
        rv = exec_fail(ctx, r, WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1, out);
    }
    rv = rv == CN_RAISED ? CN_OK : rv;
done:
    cn_buf_fini(&input);
    cn_buf_fini(&r->out);
    free(r);
    return rv;
}

static int
exec_cmp(const void *a, const void *b)
{
    return strcmp(((const struct exec_action *) a)->name, ((const struct exec_action *) b)->name);
}

static void
exec_actions_free(struct exec_action *v, size_t n)
{
    size_t i;

    for (i = 0; v != NULL && i < n; i++) {
        free(v[i].name);
        free(v[i].path);
    }
    free(v);
}

/* Scans dir (not recursively) for executable regular files whose names are valid action name
 * parts. Returns CN_OK with a new array in *out (free with exec_actions_free), sorted by name,
 * CN_IO (dir unreadable; reason on stderr) or CN_NOMEM. */
static cn_err
exec_scan(const char *dir, struct exec_action **out, size_t *n_out)
{
    struct exec_action *v = NULL;
    size_t n = 0, plen;
    struct dirent *de;
    struct stat st;
    DIR *d;
    cn_err rv = CN_OK;

    if ((d = opendir(dir)) == NULL) {
        cn_log(CN_LOG_ERROR, "--exec-dir %s: %s", dir, strerror(errno));
        return CN_IO;
    }
    while ((de = readdir(d)) != NULL) {
        char *path, *name;

        if (!exec_name_ok(de->d_name)) {
            continue;
        }
        plen = strlen(dir) + strlen(de->d_name) + 2;
        path = cn_xmalloc(plen);
        (void) snprintf(path, plen, "%s/%s", dir, de->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0) {
            free(path);
            continue;
        }
        name = cn_xmalloc(strlen(EXEC_PREFIX) + strlen(de->d_name) + 1);
        v = cn_xreallocarray(v, n + 1, sizeof(*v));
        (void) sprintf(name, EXEC_PREFIX "%s", de->d_name);
        v[n].name = name;
        v[n].path = path;
        n++;
    }
    (void) closedir(d);
    if (rv != CN_OK) {
        exec_actions_free(v, n);
        return rv;
    }
    if (n > 1) {
        qsort(v, n, sizeof(*v), exec_cmp);
    }
    *out = v;
    *n_out = n;
    return CN_OK;
}

/* ---- main ---------------------------------------------------------------------------------- */

/* The options: one table drives the flags, CAIRN_WORKER_URL and CAIRN_WORKER_CREDENTIAL, the
 * log's settings, the range checks and the help text (ir/base/opts.h). */
#define MAX_URLS CAIRN_WORKER_MAX_URLS
static const char *url_flags[MAX_URLS];
/* A string option (its flag, the name of its value in the help, its help line) and a whole
 * number one (its flag, default, range and help line). */
#define OPTION_STR(f, a, h)                                      \
    {                                                            \
        .flag = (f), .kind = CN_OPT_STR, .arg = (a), .help = (h) \
    }
#define OPTION_INT(f, d, lo, hi, h)                                                        \
    {                                                                                      \
        .flag = (f), .kind = CN_OPT_INT, .def = (d), .min = (lo), .max = (hi), .help = (h) \
    }

static struct cn_opt options[] = {
    {.flag = "url",
     .kind = CN_OPT_STR,
     .env = "CAIRN_WORKER_URL",
     .def = WP_DEFAULT_URL,
     .arg = "URL",
     .list = url_flags,
     .list_max = MAX_URLS,
     .help = "runner address; repeat it to serve several runners (the variable: separated by "
             "spaces or commas)"},
    OPTION_STR("name", "NAME", "worker name (default HOST-PID)"),
    OPTION_INT("slots", "1", 1, WP_MAX_SLOTS, "actions run at once, 1.." STR(WP_MAX_SLOTS)),
    OPTION_INT("prefetch", "0", 0, WP_MAX_PREFETCH,
               "attempts the runner may send ahead of free slots, 0.." STR(WP_MAX_PREFETCH)),
    {.flag = "credential",
     .kind = CN_OPT_STR,
     .env = "CAIRN_WORKER_CREDENTIAL",
     .arg = "TOKEN",
     .help = "shared token"},
    OPTION_STR("exec-dir", "DIR", "also serve each executable DIR/NAME as action exec.NAME"),
    OPTION_STR("tls-ca", "FILE", "tls+tcp://: PEM CA that signed the runner's certificate"),
    OPTION_STR("tls-cert-key", "FILE", "tls+tcp://: PEM certificate and key of this worker"),
    OPTION_STR("tls-server-name", "NAME", "tls+tcp://: name to check in the runner's certificate"),
    CN_OPTS_LOG_ROWS,
    /* Hidden, for tests: see run_once. */
    {.flag = "run-once", .kind = CN_OPT_STR},
    {.flag = "deadline-ms", .kind = CN_OPT_INT, .min = 0, .max = CAIRN_STD_MAX_SLEEP_MS},
};

static struct cn_opts opts_table = {
    .prog = "cairn-worker",
    /* One synopsis line and a paragraph: help2man makes the man page from this. */
    .usage = "cairn-worker [--url URL]... [--slots N] [--exec-dir DIR] [OPTION]...",
    .about = "Serves std.noop, std.echo, std.sleep, std.fail, std.flaky and std.hash to a Cairn\n"
             "runner, and with --exec-dir each executable DIR/NAME as action exec.NAME.\n"
             "SIGTERM/SIGINT stop it after running actions finish (grace " GRACE_TEXT " s);\n"
             "SIGHUP reopens the --log-file. Under systemd (NOTIFY_SOCKET) it reports READY=1\n"
             "once it dials its runner, and STOPPING=1 on SIGTERM/SIGINT.",
    .hint = "--help",
    .opts = options,
    .nopts = sizeof(options) / sizeof(options[0]),
    .max_args = 1, /* --run-once's kwargs */
};


/* Waits up to ts for a signal of sigs and returns the stop signal taken (SIGTERM, SIGINT), or 0.
 * SIGHUP is handled here: it reopens the log file (logrotate), and the worker goes on. */
static int
take_stop_signal(const sigset_t *sigs, const struct timespec *ts)
{
    int sig = sigtimedwait(sigs, NULL, ts);

    if (sig == SIGHUP) {
        cn_log_sighup();
        return 0;
    }
    return sig > 0 ? sig : 0;
}

/* Hidden test mode (--run-once ACTION JSON_KWARGS [--deadline-ms N]): runs one action here,
 * without a runner, and prints {"ok": bool, "value": ...} as JSON on stdout. Exit 0 when that
 * was printed, 2 for bad input or an action that is not served. */
static int
run_once(const char *action, const char *kwargs_json, int64_t deadline_ms, struct exec_action *ex,
         size_t nex)
{
    struct cairn_worker_ctx ctx;
    struct ir_val kwargs = ir_null(), val = ir_null(), res = ir_null();
    struct cn_buf text = CN_BUF_INIT;
    struct cn_errmsg em;
    cairn_worker_handler fn = NULL;
    void *arg = NULL;
    size_t i;
    cn_err rv;
    int code = 2;

    for (i = 0; i < CAIRN_N_STD; i++) {
        if (strcmp(cairn_std_actions[i].name, action) == 0) {
            fn = cairn_std_actions[i].fn;
        }
    }
    for (i = 0; i < nex; i++) {
        if (strcmp(ex[i].name, action) == 0) {
            fn = act_exec;
            arg = &ex[i];
        }
    }
    if (fn == NULL) {
        (void) fprintf(stderr, "cairn-worker: action %s is not served\n", action);
        return 2;
    }
    if ((rv = ir_val_from_json(kwargs_json, strlen(kwargs_json), &kwargs, &em)) != CN_OK ||
        kwargs.type != IR_T_MAP) {
        (void) fprintf(stderr, "cairn-worker: kwargs must be a JSON object: %s\n",
                       rv != CN_OK ? em.text : "not an object");
        goto out;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.action = action;
    ctx.attempt = 1;
    ctx.deadline_ms = deadline_ms > 0 ? cn_wall_ms() + deadline_ms : 0;
    if ((rv = fn(&ctx, kwargs, arg, &val)) != CN_OK) {
        /* As the SDK reports a handler failure. */
        val = ir_null();
        if ((rv = cairn_worker_error_new("WorkerError", cn_strerror(rv), ir_null(), &val)) !=
            CN_OK) {
            goto out;
        }
    }
    if ((rv = ir_map_new(2, &res)) != CN_OK ||
        (rv = ir_map_set_cstr(&res, "ok", ir_bool(!ir_is_error(val)))) != CN_OK ||
        (rv = ir_map_set_cstr(&res, "value", val)) != CN_OK) {
        val = ir_null(); /* owned by res, or released, from the first ir_map_set_cstr on */
        goto out;
    }
    val = ir_null();
    if ((rv = ir_val_to_json(res, &text, &em)) != CN_OK ||
        (rv = cn_buf_append(&text, "\n", 1)) != CN_OK) {
        (void) fprintf(stderr, "cairn-worker: result is not JSON: %s\n", cn_strerror(rv));
        goto out;
    }
    code = fwrite(text.data, 1, text.len, stdout) == text.len && fflush(stdout) == 0 ? 0 : 1;
out:
    cn_buf_fini(&text);
    ir_val_release(res);
    ir_val_release(val);
    ir_val_release(kwargs);
    return code;
}

/* Parses the command line into opts_table and sets the log up. Returns -1 to go on, with *once
 * the action of --run-once or NULL, else the exit status (--version, --help, a usage error). */
static int
parse_command_line(int argc, char **argv, const char **once)
{
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s %s\n", "cairn-worker", CAIRN_VERSION);
        return 0;
    }
    switch (cn_opts_parse(&opts_table, argc - 1, argv + 1)) {
    case CN_OPTS_HELP:
        cn_opts_help(stdout, &opts_table);
        return 0;
    case CN_OPTS_BAD:
        return 2;
    case CN_OPTS_OK:
        break;
    }
    *once = cn_opts_str(&opts_table, "run-once");
    if (*once == NULL && opts_table.nargs > 0) {
        (void) fprintf(stderr, "cairn-worker: unexpected argument '%s' (see --help)\n", argv[1]);
        return 2;
    }
    if (*once != NULL && opts_table.nargs == 0) {
        (void) fprintf(stderr, "cairn-worker: --run-once ACTION needs the kwargs (JSON) too\n");
        return 2;
    }
    if (!cn_opts_log_setup(&opts_table)) {
        return 2;
    }
    return -1;
}

/* The SDK's options from the parsed flags. */
static void
worker_options(struct cairn_worker_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->name = cn_opts_str(&opts_table, "name");
    opts->slots = (uint32_t) cn_opts_int(&opts_table, "slots");
    opts->prefetch = (uint32_t) cn_opts_int(&opts_table, "prefetch");
    opts->credential = cn_opts_str(&opts_table, "credential");
    opts->tls_ca_file = cn_opts_str(&opts_table, "tls-ca");
    opts->tls_cert_key_file = cn_opts_str(&opts_table, "tls-cert-key");
    opts->tls_server_name = cn_opts_str(&opts_table, "tls-server-name");
    opts->start_timeout_ms = 1000; /* retried by start_serving, so that a signal can interrupt */
}

/* The runners: every --url, else CAIRN_WORKER_URL's list, else the default. Fills urls and
 * returns their number; *list holds the strings split from the variable (free it once the SDK
 * has copied them). */
static size_t
runner_urls(const char **urls, char **list)
{
    char *save = NULL, *tok;
    size_t i, n = 0;

    *list = NULL;
    if (options[0].nlist > 0) {
        for (i = 0; i < options[0].nlist; i++) {
            urls[n++] = options[0].list[i];
        }
        return n;
    }
    *list = cn_xstrdup(cn_opts_str(&opts_table, "url"));
    for (tok = strtok_r(*list, " ,\t\n", &save); tok != NULL && n < MAX_URLS;
         tok = strtok_r(NULL, " ,\t\n", &save)) {
        urls[n++] = tok;
    }
    if (n == 0) {
        urls[n++] = WP_DEFAULT_URL; /* as when neither the flag nor the variable is set */
    }
    return n;
}

/* A worker for the runners at urls[0..nurls) serving the std.* actions and ex[0..nex).
 * Returns 0 with *out set, else the exit status (logged; *out is NULL or to be freed). */
static int
worker_create(const struct cairn_worker_options *opts, const char **urls, size_t nurls,
              struct exec_action *ex, size_t nex, struct cairn_worker **out)
{
    size_t i;
    cn_err rv;

    if ((rv = cairn_worker_new(urls[0], opts, out)) != CN_OK) {
        cn_log(CN_LOG_ERROR, "cannot start: %s", cn_strerror(rv));
        return 2;
    }
    for (i = 1; i < nurls; i++) {
        if (cairn_worker_add_url(*out, urls[i]) != CN_OK) {
            cn_log(CN_LOG_ERROR, "cannot start: runner address '%s' given twice", urls[i]);
            return 2;
        }
    }
    rv = CN_OK;
    for (i = 0; rv == CN_OK && i < CAIRN_N_STD; i++) {
        rv = cairn_worker_register(*out, cairn_std_actions[i].name, cairn_std_actions[i].fn, NULL);
    }
    for (i = 0; rv == CN_OK && i < nex; i++) {
        rv = cairn_worker_register(*out, ex[i].name, act_exec, &ex[i]);
    }
    if (rv != CN_OK) {
        cn_log(CN_LOG_ERROR, "cannot start: %s", cn_strerror(rv));
        return 1;
    }
    return 0;
}

/* Starts w, again after each second without a runner (start_timeout_ms), so that a stop signal
 * can end the wait. Returns -1 once started, else the exit status. */
static int
start_serving(struct cairn_worker *w, const sigset_t *sigs, const char *where)
{
    bool waiting_logged = false;
    cn_err rv;

    /* Ready means dialing: everything that could stop it at start (settings, --exec-dir) is
     * behind it, and it serves by itself once a runner answers (the SDK redials). Waiting for
     * the runner instead would turn a runner outage into failed starts under systemd
     * (TimeoutStartSec) and a boot that never finishes; STATUS= tells the two apart. */
    (void) cn_notifyf("READY=1\nSTATUS=waiting for a runner at %s", where);
    for (;;) {
        rv = cairn_worker_start(w);
        if (rv == CN_OK) {
            return -1;
        }
        if (rv != CN_IO || take_stop_signal(sigs, &(struct timespec){0, 0}) > 0) {
            (void) cn_notify("STOPPING=1");
            cn_log(rv == CN_IO ? CN_LOG_INFO : CN_LOG_ERROR, "%s",
                   rv == CN_IO ? "stopped before connecting" : cairn_worker_error(w));
            return rv == CN_IO ? 0 : 1;
        }
        if (!waiting_logged) {
            cn_log(CN_LOG_INFO, "waiting for a runner at %s", where);
            waiting_logged = true;
        }
    }
}

/* Serves until a stop signal, or until every runner refused the worker, then stops it within
 * the grace period. Returns the exit status: 1 when it was refused. */
static int
serve_until_stopped(struct cairn_worker *w, const sigset_t *sigs, const char *where,
                    size_t nactions)
{
    struct timespec poll_ts = {0, 200 * 1000000L};
    int sig = 0;
    cn_err rv;

    cn_log(CN_LOG_INFO, "serving %zu actions at %s", nactions, where);
    (void) cn_notifyf("STATUS=serving %zu actions at %s", nactions, where);
    while (cairn_worker_running(w)) {
        sig = take_stop_signal(sigs, &poll_ts);
        if (sig > 0) {
            break;
        }
    }
    rv = cairn_worker_running(w) || sig > 0 ? CN_OK : CN_PROTO;
    if (sig > 0) {
        (void) cn_notifyf("STOPPING=1\nSTATUS=%s: stopping (grace %d s)", strsignal(sig),
                          STOP_GRACE_MS / 1000);
        cn_log(CN_LOG_INFO, "%s: stopping (grace %d s)", strsignal(sig), STOP_GRACE_MS / 1000);
    }
    cairn_worker_stop(w, STOP_GRACE_MS);
    return rv == CN_OK ? 0 : 1;
}

int
main(int argc, char **argv)
{
    struct cairn_worker_options opts;
    struct cairn_worker *w = NULL;
    struct exec_action *ex = NULL;
    const char *urls[MAX_URLS], *exec_dir, *once = NULL;
    char *url_list, where[512];
    size_t nex = 0, nurls, i;
    sigset_t sigs;
    cn_err rv;
    int code;

    if ((code = parse_command_line(argc, argv, &once)) >= 0) {
        return code;
    }
    worker_options(&opts);
    exec_dir = cn_opts_str(&opts_table, "exec-dir");
    /* A child that exits without reading its stdin must not kill us (write gets EPIPE). */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR) {
        return 1;
    }
    if (exec_dir != NULL && (rv = exec_scan(exec_dir, &ex, &nex)) != CN_OK) {
        if (rv != CN_IO) { /* CN_IO: exec_scan said why */
            cn_log(CN_LOG_ERROR, "--exec-dir %s: %s", exec_dir, cn_strerror(rv));
        }
        return 2;
    }
    if (once != NULL) {
        code = run_once(once, argv[1], cn_opts_int(&opts_table, "deadline-ms"), ex, nex);
        exec_actions_free(ex, nex);
        return code;
    }
    nurls = runner_urls(urls, &url_list);
    where[0] = '\0';
    for (i = 0; i < nurls; i++) {
        size_t at = strlen(where);
        (void) snprintf(where + at, sizeof(where) - at, "%s%s", i > 0 ? " " : "", urls[i]);
    }
    /* Signals are taken synchronously (sigtimedwait) by this thread; every thread the SDK
     * starts inherits the blocked mask. */
    (void) sigemptyset(&sigs);
    (void) sigaddset(&sigs, SIGTERM);
    (void) sigaddset(&sigs, SIGINT);
    (void) sigaddset(&sigs, SIGHUP);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) {
        code = 1;
    } else {
        code = worker_create(&opts, urls, nurls, ex, nex, &w);
    }
    free(url_list); /* the SDK copied the addresses */
    if (code == 0 && (code = start_serving(w, &sigs, where)) < 0) {
        code = serve_until_stopped(w, &sigs, where, CAIRN_N_STD + nex);
    }
    cairn_worker_free(w);
    exec_actions_free(ex, nex);
    return code;
}
