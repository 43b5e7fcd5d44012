/* SPDX-License-Identifier: MIT */
/* Placeholder until the evaluator lands in this file. */
typedef int ir_eval_placeholder_;
