/* SPDX-License-Identifier: MIT */
/* A worker as a user writes one, against the installed SDK only (tests/integration/
 * test_install.py compiles it with `pkg-config --static libcairn-worker`): serves tiny.double
 * at URL until SIGTERM. Not built by meson on purpose: it must find everything through the
 * installed .pc file. */
#include <cairn/worker.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static cn_err
double_it(const struct cairn_worker_ctx *ctx, struct ir_val kwargs, void *arg, struct ir_val *out)
{
    const struct ir_val *n = ir_map_get(kwargs, "n", 1);

    (void) ctx;
    (void) arg;
    if (n == NULL || n->type != IR_T_INT) {
        return cairn_worker_error_new("TypeError", "tiny.double(n): n must be an int", ir_null(),
                                      out);
    }
    *out = ir_int(n->u.i * 2);
    return CN_OK;
}

int
main(int argc, char **argv)
{
    struct cairn_worker *w = NULL;
    sigset_t sigs;
    int sig = 0;

    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("tiny-worker 1\n");
        return 0;
    }
    if (argc != 2) {
        (void) fprintf(stderr, "usage: tiny-worker URL | --version\n");
        return 2;
    }
    (void) sigemptyset(&sigs);
    (void) sigaddset(&sigs, SIGTERM);
    (void) sigaddset(&sigs, SIGINT);
    (void) pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    if (cairn_worker_new(argv[1], NULL, &w) != CN_OK ||
        cairn_worker_register(w, "tiny.double", double_it, NULL) != CN_OK ||
        cairn_worker_start(w) != CN_OK) {
        (void) fprintf(stderr, "tiny-worker: cannot start: %s\n",
                       w != NULL ? cairn_worker_error(w) : "bad URL");
        cairn_worker_free(w);
        return 1;
    }
    printf("serving\n");
    (void) fflush(stdout);
    (void) sigwait(&sigs, &sig);
    cairn_worker_stop(w, 5000);
    cairn_worker_free(w);
    return 0;
}
