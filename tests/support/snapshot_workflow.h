/* SPDX-License-Identifier: MIT */
/*
 * t_snapshot_src: the workflow whose mid-run snapshot the snapshot tests damage (a helper, a
 * try, a retried spread and a sleep: most of what a snapshot holds), shared by the executor's
 * unit test and the snapshot fuzz target so that the fuzz corpus and the test take the same
 * DAG. Header-only: the fuzz target links no test support library.
 */
#ifndef TESTS_SUPPORT_SNAPSHOT_WORKFLOW_H
#define TESTS_SUPPORT_SNAPSHOT_WORKFLOW_H

static const char t_snapshot_src[] = "fn h(input: [v]):\n"
                                     "    try:\n"
                                     "        r = @std.echo(value=v)\n"
                                     "    except KeyError as e:\n"
                                     "        r = 0\n"
                                     "    return r\n"
                                     "fn main(input: [xs]):\n"
                                     "    a = h(1)\n"
                                     "    ys = spread xs:x -> @std.echo(value=x) [retry: 2]\n"
                                     "    sleep 1\n"
                                     "    return [a, ys]\n";

#endif
