#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ids_distinct.sh SRCROOT CC [CC ARGS...]: proves that the runner's id types (runner/exec/ids.h) keep a
# swapped argument from compiling. One call to a real backend operation, fail(instance id,
# token), is compiled twice: in the right order it must compile (so the include paths and the
# snippet are sound), with the two ids swapped it must fail, and fail for the type reason.
set -uo pipefail
root=$1; shift
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat >"$dir/swap.c" <<'C'
#include "runner/store/backend.h"

cn_err swap_check(struct rn_backend *b, const struct rn_claimed *c, struct cn_errmsg *em);

cn_err
swap_check(struct rn_backend *b, const struct rn_claimed *c, struct cn_errmsg *em)
{
#if SWAP
    return b->ops->fail(b, c->lock, c->instance_id, ir_null(), em);
#else
    return b->ops->fail(b, c->instance_id, c->lock, ir_null(), em);
#endif
}
C
compile() { LC_ALL=C "$@" -std=c11 -fsyntax-only -fdiagnostics-color=never -I"$root" "$dir/swap.c"; }
if ! compile "$@" -DSWAP=0 2>"$dir/ok.err"; then
    echo "FAIL: the call in the right order does not compile:"; cat "$dir/ok.err"; exit 1
fi
if compile "$@" -DSWAP=1 2>"$dir/swap.err"; then
    echo "FAIL: a token passed as an instance id (and the reverse) compiled"; exit 1
fi
if ! grep -q 'incompatible type' "$dir/swap.err" || ! grep -q 'rn_token' "$dir/swap.err"; then
    echo "FAIL: the swapped call failed for another reason:"; cat "$dir/swap.err"; exit 1
fi
echo "ok: swapping an instance id and a claim token does not compile"
