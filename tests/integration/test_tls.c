/* SPDX-License-Identifier: MIT */
/*
 * Workers over tls+tcp:// with client certificates required: a test CA, a runner certificate and
 * worker certificates are made with openssl when the test runs (nothing secret is committed).
 * A worker with a certificate from the CA is served; one without a certificate, or with a
 * self-signed one, never gets past the TLS handshake. The cairn-worker binary's --tls-* flags
 * are exercised the same way.
 */
#include <cairn/worker.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "ir/value.h"
#include "runner/pool/pool.h"
#include "tests/support/leak.h"
#include "tests/support/pool_util.h"

TestSuite(tls, .fini = t_leak_check_nng, .timeout = 120);

static char dir[256];

static const char *
path(const char *file)
{
    static char buf[4][512];
    static int k;

    k = (k + 1) % 4;
    (void) snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, file);
    return buf[k];
}

/* Makes the CA and the certificates once per test process. */
static void
make_certs(void)
{
    char cmd[4096];
    int rc;

    (void) snprintf(dir, sizeof(dir), "/tmp/cairn-tls-test-%d", (int) getpid());
    (void) snprintf(
        cmd, sizeof(cmd),
        "set -e; exec >/dev/null 2>&1; mkdir -p %s; cd %s; "
        "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes';"
        "openssl req -x509 $K -keyout ca.key -out ca.pem -days 1 -subj /CN=cairn-test-ca;"
        "for n in runner worker; do "
        "  openssl req $K -keyout $n.key -out $n.csr -subj /CN=$n;"
        "  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > $n.ext;"
        "  openssl x509 -req -in $n.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "    -extfile $n.ext -out $n.crt;"
        "  cat $n.crt $n.key > $n.pem;"
        "done;"
        "openssl req -x509 $K -keyout rogue.key -out rogue.crt -days 1 -subj /CN=rogue "
        "  -addext subjectAltName=DNS:localhost;"
        "cat rogue.crt rogue.key > rogue.pem",
        dir, dir);
    rc = system(cmd);
    cr_assert_eq(rc, 0, "openssl failed (%d): is it installed?", rc);
}

static void
remove_certs(void)
{
    char cmd[512];

    (void) snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void) system(cmd);
}

struct one {
    pthread_mutex_t mtx;
    int n;
    bool ok;
};

static void
on_result(void *arg, const struct rn_pool_result *r)
{
    struct one *o = arg;

    pthread_mutex_lock(&o->mtx);
    o->n++;
    o->ok = r->ok && r->value.type == IR_T_INT && r->value.u.i == 42;
    pthread_mutex_unlock(&o->mtx);
}

static cn_err
h_echo(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    (void) ctx;
    (void) arg;
    *out = ir_val_retain(*ir_map_get(kwargs, "v", 1));
    return CN_OK;
}

static struct rn_pool *
tls_pool(struct one *o, char *url, size_t n)
{
    struct rn_pool_cfg cfg;
    struct rn_pool *p = NULL;
    struct cn_errmsg em = {{0}};

    memset(o, 0, sizeof(*o));
    pthread_mutex_init(&o->mtx, NULL);
    memset(&cfg, 0, sizeof(cfg));
    cfg.listen_url = "tls+tcp://127.0.0.1:0";
    cfg.tls_cert_key_file = path("runner.pem");
    cfg.tls_ca_file = path("ca.pem");
    cfg.tls_require_client_cert = true;
    cr_assert_eq(rn_pool_start(&cfg, on_result, o, &p, &em), CN_OK, "%s", em.text);
    (void) snprintf(url, n, "tls+tcp://127.0.0.1:%d", rn_pool_port(p));
    return p;
}

static cn_err
worker_try(const char *url, const char *cert, struct cairn_worker **out)
{
    struct cairn_worker_options o;
    struct cairn_worker *w = NULL;
    cn_err rv;

    memset(&o, 0, sizeof(o));
    o.name = "tls-worker";
    o.slots = 1;
    o.start_timeout_ms = 1500;
    o.tls_ca_file = path("ca.pem");
    o.tls_cert_key_file = cert;
    o.tls_server_name = "localhost";
    cr_assert_eq(cairn_worker_new(url, &o, &w), CN_OK);
    cr_assert_eq(cairn_worker_register(w, "t.echo", h_echo, NULL), CN_OK);
    rv = cairn_worker_start(w);
    *out = w;
    return rv;
}

/* Waits (bounded) for the first result; true when one came. */
static bool
one_wait(struct one *o, int ms)
{
    int i, n = 0;

    for (i = 0; i < ms / 10 && n == 0; i++) {
        pthread_mutex_lock(&o->mtx);
        n = o->n;
        pthread_mutex_unlock(&o->mtx);
        if (n == 0) {
            usleep(10000);
        }
    }
    return n > 0;
}

Test(tls, a_worker_with_a_certificate_from_the_ca_is_served)
{
    struct one o;
    char url[128];
    struct rn_pool *p;
    struct cairn_worker *w;

    make_certs();
    p = tls_pool(&o, url, sizeof(url));
    cr_assert_eq(worker_try(url, path("worker.pem"), &w), CN_OK, "%s", cairn_worker_error(w));
    t_pool_submit(p, (struct rn_xid){{1}}, "t.echo", "v", 42, 0);
    (void) one_wait(&o, 5000);
    cr_assert_eq(o.n, 1, "no result over TLS");
    cr_assert(o.ok);
    cairn_worker_stop(w, 1000);
    cairn_worker_free(w);
    rn_pool_stop(p);
    remove_certs();
}

Test(tls, a_worker_without_a_valid_certificate_is_refused)
{
    struct one o;
    char url[128];
    struct rn_pool *p;
    struct cairn_worker *w;
    struct rn_pool_stats st;

    make_certs();
    p = tls_pool(&o, url, sizeof(url));
    cr_assert_neq(worker_try(url, NULL, &w), CN_OK, "served without a client certificate");
    cairn_worker_free(w);
    cr_assert_neq(worker_try(url, path("rogue.pem"), &w), CN_OK,
                  "served with a self-signed certificate");
    cairn_worker_free(w);
    rn_pool_stats(p, &st);
    cr_assert_eq(st.workers, 0);
    rn_pool_stop(p);
    remove_certs();
}

Test(tls, the_cairn_worker_binary_connects_with_its_tls_flags)
{
    const char *bin = getenv("CAIRN_WORKER_BIN");
    struct one o;
    char url[128];
    struct rn_pool *p;
    pid_t pid;
    int status, i;

    cr_assert_not_null(bin, "CAIRN_WORKER_BIN not set (run through meson)");
    make_certs();
    p = tls_pool(&o, url, sizeof(url));
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl(bin, bin, "--url", url, "--tls-ca", path("ca.pem"), "--tls-cert-key",
              path("worker.pem"), "--tls-server-name", "localhost", (char *) NULL);
        _exit(127);
    }
    /* Queued until the worker says hello. */
    t_pool_submit(p, (struct rn_xid){{2}}, "std.echo", "value", 42, 0);
    cr_assert(one_wait(&o, 10000), "no result from cairn-worker over TLS");
    cr_assert(o.ok);
    kill(pid, SIGTERM);
    for (i = 0; i < 500 && waitpid(pid, &status, WNOHANG) != pid; i++) {
        usleep(10000);
    }
    cr_assert_lt(i, 500, "cairn-worker did not stop");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    rn_pool_stop(p);
    remove_certs();
}
