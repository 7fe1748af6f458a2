# SPDX-License-Identifier: Apache-2.0
"""Bad inputs get a clear error naming the argument (or torch's result), never a crash.

Every case runs in a child process, so a crash (a segmentation fault, a CUDA error that kills the
context) fails that case instead of ending the suite: the child reports each case as it goes, and
when it dies the case it was in is recorded as a crash and a new child takes the cases after it.
A case either must raise (`error`: the message names one of the given words), or must give
torch's result (`match`), or may do either (`either`: an error naming the words, or torch's
result). After every case the child checks that no CUDA error was left pending. A case may also
name the exception types an error must have (torch's for the same mistake); where it names none,
any exception with the right words will do.
"""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import PACKAGE_PATH


def out_of_range(rank, dim):
    """torch's message for a dim out of range of a tensor of `rank` dims, lowered as messages are."""
    bound = max(rank, 1)
    return f"dimension out of range (expected to be in range of [{-bound}, {bound - 1}], but got {dim})"


# torch's words for an extremum of an empty set (ATen's zero_numel_check_dims), lowered
EMPTY_DIM = "{}(): expected reduction dim {} to have non-zero size."
EMPTY_ALL = "{}(): expected reduction dim to be specified for input.numel() == 0."

# reducekit's function and torch's under torch.compile (the eager backend: dynamo traces with the
# fake kernels) must fail alike: reducekit's error is raised where both raised the same type.
COMPILED_ERROR = textwrap.dedent("""\
    def compiled_error(f):
        try:
            torch.compile(f, backend='eager')(torch.randn(2, 3, device='cuda'))
        except Exception as exc:
            return exc
        raise AssertionError('no error under torch.compile')
    mine, theirs = compiled_error({}), compiled_error({})
    assert type(mine) is type(theirs), f'{{type(mine).__name__}} {{mine}}; torch: {{type(theirs).__name__}} {{theirs}}'
    raise mine""")

# name -> (expectation, words an error must name, code[, exception types an error must have]). The
# code runs with torch, reducekit (as rk) and x9 (a rank-9 CUDA tensor) in scope; `match`
# and `either` cases set `out` and `ref` (NaN is compared through isnan() or nan_to_num(), since
# assert_close takes NaN for a mismatch). Words are lower case: the message is lowered first.
CASES = {
    # rank above 8: TensorView holds 8 dims
    "softmax_rank9": ("either", ["rank"], "out = rk.softmax(x9, -1); ref = torch.softmax(x9, -1)"),
    "log_softmax_rank9": ("either", ["rank"], "out = rk.log_softmax(x9, 0); ref = torch.log_softmax(x9, 0)"),
    "sum_rank9": ("either", ["rank"], "out = rk.sum(x9, dim=-1); ref = torch.sum(x9, dim=-1)"),
    "sum_all_rank9": ("either", ["rank"], "out = rk.sum(x9); ref = torch.sum(x9)"),
    "amax_rank9": ("either", ["rank"], "out = rk.amax(x9, dim=3); ref = torch.amax(x9, dim=3)"),
    "var_rank9": ("either", ["rank"], "out = rk.var(x9, dim=1); ref = torch.var(x9, dim=1)"),
    "argmax_rank9": ("either", ["rank"], "out = rk.argmax(x9, dim=2); ref = torch.argmax(x9, dim=2)"),
    "layer_norm_rank9": ("either", ["rank"],
                         "out = rk.layer_norm(x9, [2]); ref = torch.nn.functional.layer_norm(x9, [2])"),
    "rms_norm_rank9": ("either", ["rank"], "out = rk.rms_norm(x9, [2, 2]); "
                       "ref = torch.nn.functional.rms_norm(x9, [2, 2], eps=torch.finfo(x9.dtype).eps)"),
    "softmax_backward_rank9": ("either", ["rank"], textwrap.dedent("""\
        a = x9.clone().requires_grad_(); b = x9.clone().requires_grad_()
        rk.softmax(a, -1).sum().backward(); torch.softmax(b, -1).sum().backward()
        out = a.grad; ref = b.grad""")),
    # devices and dtypes
    "softmax_cpu": ("either", ["cuda", "device"], "x = torch.randn(4, 8); out = rk.softmax(x, -1); ref = torch.softmax(x, -1)"),
    "sum_cpu": ("either", ["cuda", "device"], "x = torch.randn(4, 8); out = rk.sum(x, dim=0); ref = torch.sum(x, dim=0)"),
    "softmax_int": ("error", ["dtype", "float", "int"], "rk.softmax(torch.arange(8, device='cuda'), -1)"),
    "layer_norm_int": ("error", ["dtype", "float", "int"],
                       "rk.layer_norm(torch.arange(8, device='cuda').view(2, 4), [4])"),
    "layer_norm_weight_on_cpu": ("error", ["weight", "device", "cuda"],
                                 "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], torch.ones(4))"),
    "add_rms_norm_residual_on_cpu": ("error", ["residual", "device", "cuda"],
                                     "rk.add_rms_norm(torch.randn(2, 4, device='cuda'), torch.randn(2, 4), [4])"),
    # shapes and dims
    # a dim out of range: torch's IndexError and words, from the functions and the ops alike
    "softmax_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.softmax(torch.randn(2, 3, device='cuda'), 2)",
                                 ("IndexError",)),
    "sum_dim_out_of_range": ("error", [out_of_range(2, -3)], "rk.sum(torch.randn(2, 3, device='cuda'), dim=-3)",
                             ("IndexError",)),
    "sum_repeated_dim": ("error", ["dim", "repeat", "twice", "multiple"],
                         "rk.sum(torch.randn(2, 3, device='cuda'), dim=(0, 0))", ("RuntimeError",)),
    "log_softmax_dim_out_of_range": ("error", [out_of_range(2, 5)], "rk.log_softmax(torch.randn(2, 3, "
                                     "device='cuda'), dim=5)", ("IndexError",)),
    "amax_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.amax(torch.randn(2, 3, device='cuda'), dim=(0, 2))",
                              ("IndexError",)),
    "argmax_dim_out_of_range": ("error", [out_of_range(2, -3)], "rk.argmax(torch.randn(2, 3, device='cuda'), dim=-3)",
                                ("IndexError",)),
    "var_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.var(torch.randn(2, 3, device='cuda'), dim=2)",
                             ("IndexError",)),
    "logsumexp_dim_out_of_range": ("error", [out_of_range(3, 3)], "rk.logsumexp(torch.randn(2, 3, 4, "
                                   "device='cuda'), dim=3)", ("IndexError",)),
    "softmax_op_dim_out_of_range": ("error", [out_of_range(2, 5)], "torch.ops.reducekit.softmax(torch.randn(2, 3, "
                                    "device='cuda'), 5)", ("IndexError",)),
    "log_softmax_op_dim_out_of_range": ("error", [out_of_range(2, -3)], "torch.ops.reducekit.log_softmax("
                                        "torch.randn(2, 3, device='cuda'), -3)", ("IndexError",)),
    "softmax_backward_op_dim_out_of_range": ("error", [out_of_range(2, 2)], textwrap.dedent("""\
        y = torch.softmax(torch.randn(2, 3, device='cuda'), -1)
        torch.ops.reducekit.softmax_backward(y, torch.randn(2, 3, device='cuda'), 2)"""), ("IndexError",)),
    "sum_op_dim_out_of_range": ("error", [out_of_range(2, 2)], "torch.ops.reducekit.sum(torch.randn(2, 3, "
                                "device='cuda'), [2])", ("IndexError",)),
    "argmax_op_dim_out_of_range": ("error", [out_of_range(2, 4)], "torch.ops.reducekit.argmax(torch.randn(2, 3, "
                                   "device='cuda'), 4)", ("IndexError",)),
    "std_mean_op_dim_out_of_range": ("error", [out_of_range(2, -5)], "torch.ops.reducekit.std_mean(torch.randn(2, 3, "
                                     "device='cuda'), [0, -5])", ("IndexError",)),
    # with grad: the ops' autograd kernels (C++, python/csrc) check alike
    "softmax_grad_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.softmax(torch.randn(2, 3, device='cuda', "
                                      "requires_grad=True), 2)", ("IndexError",)),
    "sum_grad_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.sum(torch.randn(2, 3, device='cuda', "
                                  "requires_grad=True), 2)", ("IndexError",)),
    "layer_norm_shape_mismatch": ("error", ["normalized_shape", "shape"],
                                  "rk.layer_norm(torch.randn(2, 4, device='cuda'), [5])"),
    "layer_norm_weight_shape": ("error", ["weight", "shape"],
                                "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], torch.ones(5, device='cuda'))"),
    "layer_norm_bias_shape": ("error", ["bias", "shape"], "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], "
                              "torch.ones(4, device='cuda'), torch.ones(3, device='cuda'))"),
    "add_layer_norm_residual_shape": ("error", ["residual", "shape"],
                                      "rk.add_layer_norm(torch.randn(2, 4, device='cuda'), "
                                      "torch.randn(3, 4, device='cuda'), [4])"),
    "argmax_empty": ("error", [EMPTY_DIM.format("argmax", 0)], "rk.argmax(torch.randn(0, 3, device='cuda'), dim=0)",
                     ("IndexError",)),
    "amax_empty": ("error", [EMPTY_DIM.format("amax", 0)], "rk.amax(torch.randn(0, 3, device='cuda'), dim=0)",
                   ("IndexError",)),
    # zero-size and strided inputs that have an answer
    "softmax_zero_rows": ("match", [], "x = torch.randn(0, 7, device='cuda'); out = rk.softmax(x, -1); "
                          "ref = torch.softmax(x, -1)"),
    "sum_zero_size": ("match", [], "x = torch.randn(3, 0, device='cuda'); out = rk.sum(x, dim=1); ref = torch.sum(x, dim=1)"),
    "softmax_transposed": ("match", [], "x = torch.randn(6, 5, device='cuda').t(); out = rk.softmax(x, -1); "
                           "ref = torch.softmax(x, -1)"),
    "softmax_expanded": ("match", [], "x = torch.randn(1, 9, device='cuda').expand(4, 9); out = rk.softmax(x, -1); "
                         "ref = torch.softmax(x, -1)"),
    "layer_norm_sliced_rows": ("match", [], "x = torch.randn(5, 11, device='cuda')[:, :10]; "
                               "out = rk.layer_norm(x, [10]); ref = torch.nn.functional.layer_norm(x, [10])"),
    # cross_entropy: target dtype, shape and device (class-index targets must be int64, one a row)
    "cross_entropy_target_int32": ("error", ["target"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                   "torch.tensor([0, 1, 2, 3], device='cuda', dtype=torch.int32))"),
    "cross_entropy_float_target_wrong_shape": ("error", ["target"], "rk.cross_entropy(torch.randn(4, 5, "
                                               "device='cuda'), torch.rand(4, device='cuda'))"),
    "cross_entropy_target_wrong_length": ("error", ["target"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                          "torch.tensor([0, 1, 2], device='cuda'))", ("RuntimeError",)),
    # torch: "0D or 1D target tensor expected" (the same 4 elements as a [2, 2] target)
    "cross_entropy_target_2d_for_2d_logits": ("error", ["target"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                              "torch.tensor([[0, 1], [2, 3]], device='cuda'))"),
    # torch: "Expected target size [2, 3], got [3, 2]"
    "cross_entropy_target_wrong_spatial_shape": ("error", ["target"], "rk.cross_entropy(torch.randn(2, 5, 3, "
                                                 "device='cuda'), torch.zeros(3, 2, dtype=torch.long, device='cuda'))"),
    # unbatched [C] logits with a [1] target: torch raised "size mismatch (got input: [5], target: [1])"
    # until its nll_loss took a 1-D target of size 1 there (a scalar loss)
    "cross_entropy_unbatched_target_with_batch_dim": ("either", ["target"], textwrap.dedent("""\
        x = torch.randn(5, device='cuda', dtype=torch.float64); t = torch.tensor([1], device='cuda')
        out = rk.cross_entropy(x, t); ref = torch.nn.functional.cross_entropy(x, t)""")),
    "cross_entropy_target_on_cpu": ("error", ["target"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                    "torch.tensor([0, 1, 2, 3]))"),
    # cross_entropy: class weights
    "cross_entropy_weight_wrong_length": ("error", ["weight"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                          "torch.tensor([0, 1, 2, 3], device='cuda'), torch.ones(4, device='cuda'))",
                                          ("RuntimeError",)),
    "cross_entropy_weight_on_cpu": ("error", ["weight"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                    "torch.tensor([0, 1, 2, 3], device='cuda'), torch.ones(5))"),
    "cross_entropy_prob_target_weight_wrong_length": ("error", ["weight"], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda'); p = torch.softmax(torch.randn(4, 5, device='cuda'), 1)
        rk.cross_entropy(x, p, torch.ones(4, device='cuda'))""")),
    # cross_entropy: target values outside [0, C): check_targets raises naming the value, else NaN rows
    "cross_entropy_target_out_of_range_checked": ("error", ["target: 7 at flattened index 2"], "rk.cross_entropy("
                                                  "torch.randn(4, 5, device='cuda'), torch.tensor([0, 1, 7, 2], "
                                                  "device='cuda'), check_targets=True)", ("ValueError",)),
    "cross_entropy_target_out_of_range_checked_spatial": ("error", ["target: 5 at flattened index 5"],
                                                          textwrap.dedent("""\
        t = torch.zeros(2, 3, dtype=torch.long, device='cuda'); t[1, 2] = 5
        rk.cross_entropy(torch.randn(2, 5, 3, device='cuda'), t, check_targets=True)"""), ("ValueError",)),
    "cross_entropy_module_check_targets": ("error", ["target: 7 at flattened index 2"], "rk.nn.CrossEntropyLoss("
                                           "check_targets=True)(torch.randn(4, 5, device='cuda'), "
                                           "torch.tensor([0, 1, 7, 2], device='cuda'))", ("ValueError",)),
    "cross_entropy_target_out_of_range_unchecked_none": ("match", [], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda', dtype=torch.float64); t = torch.tensor([0, 1, 7, 2], device='cuda')
        out = rk.cross_entropy(x, t, reduction='none').nan_to_num(nan=-1.0)  # row 2's loss is NaN
        ref = torch.nn.functional.cross_entropy(x, t.clamp(max=4), reduction='none'); ref[2] = -1.0""")),
    "cross_entropy_target_out_of_range_unchecked_mean": ("match", [], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda'); t = torch.tensor([0, -3, 1, 2], device='cuda')
        out = rk.cross_entropy(x, t).isnan(); ref = torch.tensor(True, device='cuda')""")),
    "cross_entropy_target_out_of_range_unchecked_backward": ("match", [], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda', dtype=torch.float64, requires_grad=True)
        t = torch.tensor([0, 1, 7, 2], device='cuda')
        rk.cross_entropy(x, t, reduction='sum').backward()
        y = x.detach().clone().requires_grad_()
        torch.nn.functional.cross_entropy(y, t.clamp(max=4), reduction='sum').backward()
        out = x.grad.nan_to_num(nan=-1.0)  # row 2's gradient is NaN
        ref = y.grad.clone(); ref[2] = -1.0""")),
    # cross_entropy: options out of range, an unknown reduction, arguments that do not go together
    "cross_entropy_label_smoothing_above_one": ("error", ["label_smoothing"], "rk.cross_entropy(torch.randn(4, 5, "
                                                "device='cuda'), torch.tensor([0, 1, 2, 3], device='cuda'), "
                                                "label_smoothing=1.5)", ("RuntimeError",)),
    "cross_entropy_prob_label_smoothing_negative": ("error", ["label_smoothing"], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda'); p = torch.softmax(torch.randn(4, 5, device='cuda'), 1)
        rk.cross_entropy(x, p, label_smoothing=-0.1)""")),
    "cross_entropy_softcap_negative": ("error", ["softcap"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                       "torch.tensor([0, 1, 2, 3], device='cuda'), softcap=-1.0)"),
    "cross_entropy_lse_square_scale_nan": ("error", ["lse_square_scale"], "rk.cross_entropy(torch.randn(4, 5, "
                                           "device='cuda'), torch.tensor([0, 1, 2, 3], device='cuda'), "
                                           "lse_square_scale=float('nan'))"),
    "cross_entropy_reduction_invalid": ("error", ["reduction"], "rk.cross_entropy(torch.randn(4, 5, device='cuda'), "
                                        "torch.tensor([0, 1, 2, 3], device='cuda'), reduction='avg')",
                                        ("ValueError",)),
    "cross_entropy_module_reduction_invalid": ("error", ["reduction"], "rk.nn.CrossEntropyLoss(reduction='avg')("
                                               "torch.randn(4, 5, device='cuda'), torch.tensor([0, 1, 2, 3], "
                                               "device='cuda'))", ("ValueError",)),
    "cross_entropy_prob_target_ignore_index": ("error", ["ignore_index"], textwrap.dedent("""\
        x = torch.randn(4, 5, device='cuda'); p = torch.softmax(torch.randn(4, 5, device='cuda'), 1)
        rk.cross_entropy(x, p, ignore_index=1)""")),
    # cross_entropy: logits of rank 0 and 1, on the CPU, of an integer dtype, without classes, without rows
    "cross_entropy_logits_rank0_prob_target": ("error", ["input"], "rk.cross_entropy(torch.tensor(0.5, device='cuda'), "
                                               "torch.tensor(1.0, device='cuda'))"),
    # torch's own error here (log_softmax over dim 1 of a 0-d tensor): an IndexError naming the dim
    "cross_entropy_logits_rank0_index_target": ("error", ["dimension out of range", "input", "logits"],
                                                "rk.cross_entropy(torch.tensor(0.5, device='cuda'), "
                                                "torch.tensor([0], device='cuda'))", ("IndexError",)),
    "cross_entropy_unbatched_rank1": ("match", [], textwrap.dedent("""\
        x = torch.randn(5, device='cuda', dtype=torch.float64); t = torch.tensor(3, device='cuda')
        out = (rk.cross_entropy(x, t), rk.cross_entropy(x, t, reduction='none'))
        ref = (torch.nn.functional.cross_entropy(x, t), torch.nn.functional.cross_entropy(x, t, reduction='none'))""")),
    # CPU logits: an error naming them, as the other ops' CPU kernels give ("input: expected a CUDA tensor")
    "cross_entropy_logits_cpu": ("error", ["logits"], "rk.cross_entropy(torch.randn(4, 5), "
                                 "torch.tensor([0, 1, 2, 3]))"),
    "cross_entropy_logits_int": ("error", ["logits"], "rk.cross_entropy(torch.arange(20, device='cuda').view(4, 5), "
                                 "torch.tensor([0, 1, 2, 3], device='cuda'))", ("RuntimeError",)),
    "cross_entropy_zero_classes": ("error", ["no classes"], "rk.cross_entropy(torch.randn(4, 0, device='cuda'), "
                                   "torch.zeros(4, dtype=torch.long, device='cuda'))"),
    "cross_entropy_empty_batch": ("match", [], textwrap.dedent("""\
        x = torch.randn(0, 5, device='cuda', dtype=torch.float64); t = torch.zeros(0, dtype=torch.long, device='cuda')
        F = torch.nn.functional
        out = (rk.cross_entropy(x, t, reduction='none'), rk.cross_entropy(x, t, reduction='sum'),
               rk.cross_entropy(x, t).isnan())  # the mean over no rows: 0 / 0
        ref = (F.cross_entropy(x, t, reduction='none'), F.cross_entropy(x, t, reduction='sum'),
               F.cross_entropy(x, t).isnan())""")),
    # batch_norm: running statistics of the wrong length, device or dtype, or only one of them
    "batch_norm_running_mean_wrong_length": ("error", ["running_mean"], "rk.batch_norm(torch.randn(4, 3, "
                                             "device='cuda'), torch.zeros(5, device='cuda'), torch.ones(3, "
                                             "device='cuda'))", ("RuntimeError",)),
    "batch_norm_running_var_wrong_length_training": ("error", ["running_var"], "rk.batch_norm(torch.randn(4, 3, "
                                                     "device='cuda'), torch.zeros(3, device='cuda'), "
                                                     "torch.ones(2, device='cuda'), training=True)"),
    "batch_norm_running_mean_on_cpu": ("error", ["running_mean"], "rk.batch_norm(torch.randn(4, 3, device='cuda'), "
                                       "torch.zeros(3), torch.ones(3, device='cuda'))"),
    # float64 statistics for float32 input: reducekit updates a float32 copy and writes it back
    "batch_norm_running_stats_float64": ("either", ["running_mean", "dtype"], textwrap.dedent("""\
        x = torch.randn(8, 3, device='cuda')
        rm = torch.randn(3, device='cuda', dtype=torch.float64)
        rv = torch.rand(3, device='cuda', dtype=torch.float64) + 0.5
        rm32, rv32 = rm.float(), rv.float()
        y = rk.batch_norm(x, rm, rv, training=True)
        out = (y, rm.float(), rv.float())
        ref = (torch.nn.functional.batch_norm(x, rm32, rv32, training=True), rm32, rv32)""")),
    "batch_norm_running_mean_without_running_var": ("error", ["running_var"], "rk.batch_norm(torch.randn(4, 3, "
                                                    "device='cuda'), torch.zeros(3, device='cuda'), None, "
                                                    "training=True)"),
    "batch_norm_inference_without_running_stats": ("error", ["running_mean"], "rk.batch_norm(torch.randn(4, 3, "
                                                   "device='cuda'), None, None, training=False)", ("RuntimeError",)),
    # batch_norm: one value per channel in training (torch's ValueError), ranks outside 2..5
    "batch_norm_training_one_value_per_channel": ("error", ["more than 1 value per channel"], "rk.batch_norm("
                                                  "torch.randn(1, 3, device='cuda'), None, None, training=True)",
                                                  ("ValueError",)),
    "batch_norm_module_one_value_per_channel": ("error", ["more than 1 value per channel"],
                                                "rk.nn.BatchNorm2d(3).cuda()(torch.randn(1, 3, 1, 1, device='cuda'))",
                                                ("ValueError",)),
    "batch_norm_rank1": ("error", ["rank"], "rk.batch_norm(torch.randn(3, device='cuda'), torch.zeros(3, "
                         "device='cuda'), torch.ones(3, device='cuda'))"),
    "batch_norm_module_rank1": ("error", ["expected 2d or 3d input"], "rk.nn.BatchNorm1d(3).cuda()(torch.randn(3, "
                                "device='cuda'))", ("ValueError",)),
    "batch_norm3d_module_rank4": ("error", ["expected 5d input"], "rk.nn.BatchNorm3d(3).cuda()(torch.randn(2, 3, 4, 4, "
                                  "device='cuda'))", ("ValueError",)),
    "batch_norm_zero_channels": ("either", ["channel"], textwrap.dedent("""\
        x = torch.randn(4, 0, device='cuda'); rm = torch.zeros(0, device='cuda'); rv = torch.ones(0, device='cuda')
        out = rk.batch_norm(x, rm, rv); ref = torch.nn.functional.batch_norm(x, rm, rv)""")),
    "batch_norm_int_input": ("error", ["int64"], "rk.batch_norm(torch.arange(12, device='cuda').view(4, 3), None, "
                             "None, training=True)"),
    # batch_norm: weight and bias of the wrong length or device, eps and momentum
    "batch_norm_weight_wrong_length": ("error", ["weight"], "rk.batch_norm(torch.randn(4, 3, device='cuda'), "
                                       "torch.zeros(3, device='cuda'), torch.ones(3, device='cuda'), "
                                       "torch.ones(4, device='cuda'))"),
    "batch_norm_bias_on_cpu": ("error", ["bias"], "rk.batch_norm(torch.randn(4, 3, device='cuda'), torch.zeros(3, "
                               "device='cuda'), torch.ones(3, device='cuda'), None, torch.zeros(3))"),
    "batch_norm_eps_negative": ("error", ["eps"], "rk.batch_norm(torch.randn(4, 3, device='cuda'), torch.zeros(3, "
                                "device='cuda'), torch.ones(3, device='cuda'), eps=-1.0)"),
    # torch: "batch_norm(): argument 'momentum' (position 7) must be float, not NoneType"
    "batch_norm_functional_momentum_none": ("error", ["momentum"], "rk.batch_norm(torch.randn(4, 3, device='cuda'), "
                                            "torch.zeros(3, device='cuda'), torch.ones(3, device='cuda'), "
                                            "training=True, momentum=None)", ("TypeError",)),
    # the modules take momentum=None: a cumulative average over the batches seen, as torch's
    "batch_norm_module_momentum_none": ("match", [], textwrap.dedent("""\
        m = rk.nn.BatchNorm1d(3, momentum=None).cuda(); r = torch.nn.BatchNorm1d(3, momentum=None).cuda()
        xs = [torch.randn(8, 3, device='cuda') for _ in range(3)]
        ys = [m(x) for x in xs]; zs = [r(x) for x in xs]
        out = (ys[-1], m.running_mean, m.running_var, m.num_batches_tracked)
        ref = (zs[-1], r.running_mean, r.running_var, r.num_batches_tracked)""")),
    # reductions: dims out of range or repeated (mean, std, var_mean, std_mean, logsumexp, prod, amin, argmin)
    "mean_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.mean(torch.randn(2, 3, device='cuda'), dim=2)",
                              ("IndexError",)),
    "std_repeated_dim": ("error", ["appears twice", "multiple times"], "rk.std(torch.randn(2, 3, device='cuda'), "
                         "dim=(1, -1))", ("RuntimeError",)),
    "var_mean_dim_out_of_range": ("error", [out_of_range(2, -3)], "rk.var_mean(torch.randn(2, 3, device='cuda'), "
                                  "dim=-3)", ("IndexError",)),
    "std_mean_dim_out_of_range": ("error", [out_of_range(2, 7)], "rk.std_mean(torch.randn(2, 3, device='cuda'), "
                                  "dim=[0, 7])", ("IndexError",)),
    "logsumexp_repeated_dim": ("error", ["appears twice", "multiple times"], "rk.logsumexp(torch.randn(2, 3, "
                               "device='cuda'), dim=(0, -2))", ("RuntimeError",)),
    "prod_dim_out_of_range": ("error", [out_of_range(2, 5)], "rk.prod(torch.randn(2, 3, device='cuda'), dim=5)",
                              ("IndexError",)),
    "amin_repeated_dim": ("error", ["appears twice", "multiple times"], "rk.amin(torch.randn(2, 3, device='cuda'), "
                          "dim=[1, 1])", ("RuntimeError",)),
    "argmin_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.argmin(torch.randn(2, 3, device='cuda'), dim=2)",
                                ("IndexError",)),
    "argmax_0d_dim_out_of_range": ("error", [out_of_range(0, 1)], "rk.argmax(torch.tensor(2.0, device='cuda'), dim=1)",
                                   ("IndexError",)),
    "sum_0d_dim_out_of_range": ("error", [out_of_range(0, -2)], "rk.sum(torch.tensor(2.0, device='cuda'), dim=-2)",
                                ("IndexError",)),
    "var_unbiased_and_correction": ("error", ["correction"], "rk.var(torch.randn(3, 4, device='cuda'), 1, True, "
                                    "correction=0)", ("TypeError",)),
    # reductions: keepdim with an empty dim list (every dim, as torch) or over zero-size dims
    "sum_empty_dim_list_keepdim": ("match", [], "x = torch.randn(3, 4, device='cuda'); "
                                   "out = rk.sum(x, dim=[], keepdim=True); ref = torch.sum(x, dim=[], keepdim=True)"),
    "amax_default_dims_keepdim": ("match", [], "x = torch.randn(3, 4, device='cuda'); "
                                  "out = rk.amax(x, keepdim=True); ref = torch.amax(x, keepdim=True)"),
    "mean_empty_set_keepdim": ("match", [], "x = torch.randn(3, 0, device='cuda'); "
                               "out = rk.mean(x, dim=1, keepdim=True).isnan(); "
                               "ref = torch.mean(x, dim=1, keepdim=True).isnan()"),
    "amax_zero_size_kept_dim_keepdim": ("match", [], "x = torch.randn(3, 0, device='cuda'); "
                                        "out = rk.amax(x, dim=0, keepdim=True); "
                                        "ref = torch.amax(x, dim=0, keepdim=True)"),
    # reductions: an empty reduced set, where torch raises (extrema, arg-extrema) or has a value
    "amin_empty_dim": ("error", [EMPTY_DIM.format("amin", 0)], "rk.amin(torch.randn(0, 3, device='cuda'), dim=0)",
                       ("IndexError",)),
    "argmin_empty_all": ("error", [EMPTY_ALL.format("argmin")], "rk.argmin(torch.randn(0, device='cuda'))",
                         ("IndexError",)),
    # torch names the dim as given for amax/amin, wrapped for argmax/argmin
    "amax_empty_negative_dim": ("error", [EMPTY_DIM.format("amax", -2)], "rk.amax(torch.randn(0, 3, "
                                "device='cuda'), dim=-2)", ("IndexError",)),
    "argmax_empty_negative_dim": ("error", [EMPTY_DIM.format("argmax", 1)], "rk.argmax(torch.randn(3, 0, "
                                  "device='cuda'), dim=-1)", ("IndexError",)),
    "amin_empty_second_dim": ("error", [EMPTY_DIM.format("amin", 2)], "rk.amin(torch.randn(2, 3, 0, "
                              "device='cuda'), dim=(0, 2))", ("IndexError",)),
    "argmax_op_empty_dim": ("error", [EMPTY_DIM.format("argmax", 0)], "torch.ops.reducekit.argmax(torch.randn(0, 3, "
                            "device='cuda'), 0)", ("IndexError",)),
    "amax_op_empty_dim": ("error", [EMPTY_DIM.format("amax", 0)], "torch.ops.reducekit.amax(torch.randn(0, 3, "
                          "device='cuda'), [0])", ("IndexError",)),
    # every dim of an empty tensor: torch's RuntimeError for amax/amin, IndexError for argmax/argmin
    "amax_empty_all": ("error", [EMPTY_ALL.format("amax") + " specify the reduction dim with the 'dim' argument."],
                       "rk.amax(torch.randn(2, 0, device='cuda'))", ("RuntimeError",)),
    "amin_empty_dim_list": ("error", [EMPTY_ALL.format("amin")], "rk.amin(torch.randn(0, 3, device='cuda'), dim=[])",
                            ("RuntimeError",)),
    "argmax_empty_all": ("error", [EMPTY_ALL.format("argmax")], "rk.argmax(torch.randn(2, 0, device='cuda'))",
                         ("IndexError",)),
    # an empty tensor whose reduced dims are not empty: an empty result, as torch's
    "argmax_empty_tensor_nonempty_dim": ("match", [], "x = torch.randn(0, 3, device='cuda'); "
                                         "out = rk.argmax(x, dim=1); ref = torch.argmax(x, dim=1)"),
    "amin_empty_tensor_nonempty_dim": ("match", [], "x = torch.randn(0, 3, device='cuda'); "
                                       "out = rk.amin(x, dim=-1); ref = torch.amin(x, dim=-1)"),
    "logsumexp_empty_dim": ("match", [], "x = torch.randn(3, 0, device='cuda'); "
                            "out = rk.logsumexp(x, 1); ref = torch.logsumexp(x, 1)"),
    "prod_empty_dim": ("match", [], "x = torch.randn(3, 0, device='cuda'); out = rk.prod(x, 1); "
                       "ref = torch.prod(x, 1)"),
    # reductions: dtypes reducekit does not take (bool, int64, complex64, float8) and an integer dtype=
    "sum_bool": ("error", ["bool"], "rk.sum(torch.ones(3, 4, dtype=torch.bool, device='cuda'), dim=1)"),
    "mean_int64": ("error", ["int64"], "rk.mean(torch.arange(12, device='cuda').view(3, 4), dim=1)"),
    "std_mean_int64": ("error", ["int64"], "rk.std_mean(torch.arange(12, device='cuda').view(3, 4), dim=1)"),
    "var_complex64": ("error", ["complex"], "rk.var(torch.randn(3, 4, dtype=torch.complex64, device='cuda'), dim=1)"),
    "amax_float8": ("error", ["float8"], "rk.amax(torch.randn(3, 4, device='cuda').to(torch.float8_e4m3fn), dim=1)"),
    # an unsupported dtype= is named as such (not as the output or input made from it)
    "sum_integer_dtype_argument": ("error", ["dtype: int64 is not supported; sum"], "rk.sum(torch.randn(3, 4, "
                                   "device='cuda'), dim=1, dtype=torch.int64)", ("RuntimeError",)),
    "sum_all_integer_dtype_argument": ("error", ["dtype: int64 is not supported; sum"], "rk.sum(torch.randn(3, 4, "
                                       "device='cuda'), dtype=torch.int64)", ("RuntimeError",)),
    "mean_integer_dtype_argument": ("error", ["dtype: int32 is not supported; mean"], "rk.mean(torch.randn(3, 4, "
                                    "device='cuda'), dim=1, dtype=torch.int32)", ("RuntimeError",)),
    "prod_integer_dtype_argument": ("error", ["dtype: int64 is not supported; prod"], "rk.prod(torch.randn(3, 4, "
                                    "device='cuda'), dim=1, dtype=torch.int64)", ("RuntimeError",)),
    "sum_op_bool_dtype_argument": ("error", ["dtype: bool is not supported; sum"], "torch.ops.reducekit.sum("
                                   "torch.randn(3, 4, device='cuda'), [1], dtype=torch.bool)", ("RuntimeError",)),
    # meta tensors: shapes from the fake kernels, bad dims refused as on CUDA
    "sum_meta": ("match", [], "x = torch.randn(3, 4, device='meta'); out = rk.sum(x, dim=0); "
                 "ref = torch.sum(x, dim=0)"),
    "softmax_meta": ("match", [], "x = torch.randn(3, 4, device='meta'); out = rk.softmax(x, -1); "
                     "ref = torch.softmax(x, -1)"),
    "argmax_meta_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.argmax(torch.randn(3, 4, device='meta'), "
                                     "dim=2)", ("IndexError",)),
    "var_meta_repeated_dim": ("error", ["appears twice", "multiple times"], "rk.var(torch.randn(3, 4, device='meta'), "
                              "dim=(0, 0))", ("RuntimeError",)),
    "softmax_meta_dim_out_of_range": ("error", [out_of_range(2, 5)], "rk.softmax(torch.randn(2, 3, device='meta'), 5)",
                                      ("IndexError",)),
    "sum_meta_dim_out_of_range": ("error", [out_of_range(2, -3)], "rk.sum(torch.randn(3, 4, device='meta'), dim=-3)",
                                  ("IndexError",)),
    "log_softmax_backward_meta_dim_out_of_range": ("error", [out_of_range(2, 2)], "torch.ops.reducekit."
                                                   "log_softmax_backward(torch.randn(2, 3, device='meta'), "
                                                   "torch.randn(2, 3, device='meta'), 2)", ("IndexError",)),
    "amax_meta_empty_dim": ("error", [EMPTY_DIM.format("amax", -2)], "rk.amax(torch.randn(0, 3, device='meta'), "
                            "dim=-2)", ("IndexError",)),
    "argmin_meta_empty_all": ("error", [EMPTY_ALL.format("argmin")], "rk.argmin(torch.randn(0, device='meta'))",
                              ("IndexError",)),
    "amin_meta_empty_all": ("error", [EMPTY_ALL.format("amin")], "rk.amin(torch.randn(0, 3, device='meta'))",
                            ("RuntimeError",)),
    "sum_meta_integer_dtype_argument": ("error", ["dtype: int64 is not supported; sum"], "rk.sum(torch.randn(3, 4, "
                                        "device='meta'), dim=1, dtype=torch.int64)", ("RuntimeError",)),
    # torch.compile: the fake kernels' errors reach the caller as torch's own do
    "softmax_compiled_dim_out_of_range": ("error", [out_of_range(2, 5)], COMPILED_ERROR.format(
        "lambda x: rk.softmax(x, 5)", "lambda x: torch.softmax(x, 5)")),
    "sum_compiled_dim_out_of_range": ("error", [out_of_range(2, 2)], COMPILED_ERROR.format(
        "lambda x: rk.sum(x, 2)", "lambda x: torch.sum(x, 2)")),
    "amax_compiled_empty_dim": ("error", [EMPTY_DIM.format("amax", 0)], COMPILED_ERROR.format(
        "lambda x: rk.amax(x[:0], 0)", "lambda x: torch.amax(x[:0], 0)")),
    "layer_norm_meta_shape_mismatch": ("error", ["normalized_shape"], "rk.layer_norm(torch.randn(2, 4, "
                                       "device='meta'), [5])"),
    # softmax / log_softmax: dtype= an integer dtype, 0-d tensors, complex input, the modules
    "softmax_dtype_int64": ("error", ["dtype: int64 is not supported; softmax computes in"], "rk.softmax("
                            "torch.randn(2, 3, device='cuda'), -1, dtype=torch.int64)", ("RuntimeError",)),
    "log_softmax_dtype_int32": ("error", ["dtype: int32 is not supported; log_softmax computes in"], "rk.log_softmax("
                                "torch.randn(2, 3, device='cuda'), 0, dtype=torch.int32)", ("RuntimeError",)),
    "softmax_dtype_float8": ("error", ["dtype: float8_e4m3fn is not supported; softmax"], "rk.softmax("
                             "torch.randn(2, 3, device='cuda'), -1, dtype=torch.float8_e4m3fn)", ("RuntimeError",)),
    "softmax_0d_dim_out_of_range": ("error", [out_of_range(0, 1)], "rk.softmax(torch.tensor(1.5, device='cuda'), 1)",
                                    ("IndexError",)),
    "log_softmax_0d": ("match", [], "x = torch.tensor(1.5, device='cuda'); out = rk.log_softmax(x, -1); "
                       "ref = torch.log_softmax(x, -1)"),
    "softmax_complex": ("error", ["complex"], "rk.softmax(torch.randn(2, 3, dtype=torch.complex64, device='cuda'), -1)",
                        ("RuntimeError",)),
    "softmax_module_dim_out_of_range": ("error", [out_of_range(2, 2)], "rk.nn.Softmax(dim=2)(torch.randn(2, 3, "
                                        "device='cuda'))", ("IndexError",)),
    "log_softmax_module_int": ("error", ["int64"], "rk.nn.LogSoftmax(dim=-1)(torch.arange(6, "
                               "device='cuda').view(2, 3))"),
    # norms: normalized_shape longer than the rank, empty, or unlike the trailing dims
    "layer_norm_normalized_shape_longer_than_rank": ("error", ["normalized_shape"], "rk.layer_norm(torch.randn(2, 4, "
                                                     "device='cuda'), [3, 2, 4])", ("RuntimeError",)),
    "rms_norm_normalized_shape_longer_than_rank": ("error", ["normalized_shape"], "rk.rms_norm(torch.randn(4, "
                                                   "device='cuda'), [1, 4])"),
    "rms_norm_0d_input": ("error", ["normalized_shape"], "rk.rms_norm(torch.tensor(1.0, device='cuda'), [1])"),
    "layer_norm_empty_normalized_shape": ("error", ["normalized_shape"], "rk.layer_norm(torch.randn(2, 4, "
                                          "device='cuda'), [])", ("RuntimeError",)),
    "layer_norm_module_shape_mismatch": ("error", ["normalized_shape"], "rk.nn.LayerNorm(4).cuda()(torch.randn(2, 5, "
                                         "device='cuda'))"),
    "rms_norm_module_shape_mismatch": ("error", ["normalized_shape"], "rk.nn.RMSNorm([2, 4]).cuda()("
                                       "torch.randn(3, 4, 2, device='cuda'))"),
    # norms: eps out of range
    "layer_norm_eps_negative": ("error", ["eps"], "rk.layer_norm(torch.randn(2, 4, device='cuda'), [4], eps=-1e-3)"),
    "rms_norm_eps_nan": ("error", ["eps"], "rk.rms_norm(torch.randn(2, 4, device='cuda'), [4], eps=float('nan'))"),
    # norms: weight, bias and residual of the wrong dtype, shape or device
    "rms_norm_weight_wrong_dtype": ("error", ["weight"], "rk.rms_norm(torch.randn(2, 4, device='cuda'), [4], "
                                    "torch.ones(4, device='cuda', dtype=torch.float16))"),
    "rms_norm_weight_int64": ("error", ["weight"], "rk.rms_norm(torch.randn(2, 4, device='cuda'), [4], "
                              "torch.ones(4, device='cuda', dtype=torch.long))"),
    "layer_norm_bias_dtype_unlike_weight": ("error", ["bias"], "rk.layer_norm(torch.randn(2, 4, device='cuda', "
                                            "dtype=torch.bfloat16), [4], torch.ones(4, device='cuda'), "
                                            "torch.zeros(4, device='cuda', dtype=torch.bfloat16))"),
    "layer_norm_weight_flat_for_2d_shape": ("error", ["weight"], "rk.layer_norm(torch.randn(3, 2, 4, device='cuda'), "
                                            "[2, 4], torch.ones(8, device='cuda'))"),
    "rms_norm_bias_wrong_shape": ("error", ["bias"], "rk.rms_norm(torch.randn(2, 4, device='cuda'), [4], "
                                  "bias=torch.zeros(3, device='cuda'))"),
    "rms_norm_bias_dtype_unlike_weight": ("error", ["bias"], "rk.rms_norm(torch.randn(2, 4, device='cuda', "
                                          "dtype=torch.bfloat16), [4], torch.ones(4, device='cuda'), None, "
                                          "torch.zeros(4, device='cuda', dtype=torch.bfloat16))"),
    "add_rms_norm_bias_on_cpu": ("error", ["bias", "cuda"], "rk.add_rms_norm(torch.randn(2, 4, device='cuda'), "
                                 "torch.randn(2, 4, device='cuda'), [4], bias=torch.zeros(4))"),
    "add_rms_norm_residual_dtype": ("error", ["residual"], "rk.add_rms_norm(torch.randn(2, 4, device='cuda'), "
                                    "torch.randn(2, 4, device='cuda', dtype=torch.float16), [4])"),
    "add_rms_norm_module_residual_shape": ("error", ["residual"], "rk.nn.AddRMSNorm(4).cuda()(torch.randn(2, 4, "
                                           "device='cuda'), torch.randn(3, 4, device='cuda'))"),
    "add_layer_norm_module_residual_on_cpu": ("error", ["residual"], "rk.nn.AddLayerNorm(4).cuda()(torch.randn(2, 4, "
                                              "device='cuda'), torch.randn(2, 4))"),
    "rms_norm_out_dtype_int": ("error", ["out_dtype"], "rk.rms_norm(torch.randn(2, 4, device='cuda'), [4], "
                               "out_dtype=torch.int64)"),
    "layer_norm_out_dtype_weight_dtype": ("error", ["weight"], "rk.layer_norm(torch.randn(2, 4, device='cuda', "
                                          "dtype=torch.bfloat16), [4], torch.ones(4, device='cuda', "
                                          "dtype=torch.float16), out_dtype=torch.float32)"),
    "add_rms_norm_float32_stream_residual_shape": ("error", ["residual"], "rk.add_rms_norm(torch.randn(2, 4, "
                                                   "device='cuda', dtype=torch.bfloat16), torch.randn(4, "
                                                   "device='cuda'), [4], residual_in_float32=True)"),
    "add_layer_norm_float32_stream_residual_on_cpu": ("error", ["residual"], "rk.add_layer_norm(torch.randn(2, 4, "
                                                      "device='cuda', dtype=torch.bfloat16), torch.randn(2, 4), [4], "
                                                      "residual_in_float32=True)"),
    "add_rms_norm_float32_stream_input_on_cpu": ("error", ["input", "cuda"], "rk.add_rms_norm(torch.randn(2, 4, "
                                                 "dtype=torch.bfloat16), torch.randn(2, 4), [4], "
                                                 "residual_in_float32=True)"),
    "layer_norm_cpu": ("either", ["cuda", "device"], "x = torch.randn(2, 4); out = rk.layer_norm(x, [4]); "
                       "ref = torch.nn.functional.layer_norm(x, [4])"),
    # patch, unpatch, patch_functional: what they are given
    "patch_not_a_module": ("error", ["model"], "rk.patch('model')", ("TypeError",)),
    "unpatch_not_a_module": ("error", ["model"], "rk.unpatch(None)", ("TypeError",)),
    "patch_unknown_family": ("error", ["ops: unknown"], "rk.patch(torch.nn.Softmax(dim=-1), ops=['softmaxx'])",
                             ("ValueError",)),
    "patch_functional_ops_not_iterable": ("error", ["ops"], "with rk.patch_functional(ops=5):\n    pass",
                                          ("TypeError",)),
    # reducekit's error from inside the block, and torch's function back in place after it
    "patch_functional_bad_weight_raises_and_restores": ("error", ["weight"], textwrap.dedent("""\
        import torch.nn.functional as F
        found = F.layer_norm
        try:
            with rk.patch_functional():
                F.layer_norm(torch.randn(2, 4, device='cuda'), [4], torch.ones(5, device='cuda'))
        finally:
            assert F.layer_norm is found, "patch_functional left its layer_norm in place after an error"
        """)),
}

CHILD = textwrap.dedent("""\
    import json, sys, traceback
    sys.path.insert(0, {path!r})
    import torch
    import reducekit as rk
    cases = json.loads({cases!r})
    for name in json.loads(sys.argv[1]):
        print(json.dumps({{"start": name}}), flush=True)
        scope = {{"torch": torch, "rk": rk, "x9": torch.randn(*[2] * 9, device="cuda")}}
        result = {{"name": name}}
        try:
            exec(cases[name], scope)
            if "out" in scope:
                torch.testing.assert_close(scope["out"], scope["ref"])
                result["status"] = "match"
            else:
                result["status"] = "returned"
        except AssertionError as exc:
            result.update(status="mismatch", message=str(exc)[:500])
        except Exception as exc:
            result.update(status="raised", type=type(exc).__name__, message=str(exc)[:500])
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            result["pending"] = str(exc)[:300]
        print(json.dumps(result), flush=True)
    """)


def _run_all():
    """Runs every case, a fresh child after each crash; returns name -> result."""
    codes = {name: case[2] for name, case in CASES.items()}
    script = CHILD.format(path=PACKAGE_PATH, cases=json.dumps(codes))
    left, results = list(CASES), {}
    while left:
        proc = subprocess.run([sys.executable, "-c", script, json.dumps(left)], capture_output=True, text=True,
                              timeout=600, cwd=Path(__file__).parent)
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = record
                started = None
        if started is None and proc.returncode != 0:  # died before its first case
            raise RuntimeError(f"the child failed before any case:\n{proc.stderr[-3000:]}")
        if started is not None:
            results[started] = {"name": started, "status": "crashed", "returncode": proc.returncode,
                                "stderr": proc.stderr[-1000:]}
        left = [name for name in left if name not in results]
    return results


@pytest.fixture(scope="module")
def results():
    return _run_all()


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_gets_an_answer_or_a_clear_error(results, name):
    expect, words, _, *types = CASES[name]
    r = results[name]
    assert r["status"] != "crashed", f"{name} crashed the process: {r}"
    assert "pending" not in r, f"{name} left a CUDA error pending: {r['pending']}"
    assert r["status"] != "mismatch", f"{name} gave a result unlike torch's: {r['message']}"
    if expect == "match":
        assert r["status"] == "match", r
    elif expect == "error":
        assert r["status"] == "raised", f"{name} should raise, got {r}"
    if r["status"] == "raised":
        assert expect != "match", r
        message = r["message"].lower()
        assert any(w in message for w in words), f"{name}: the error names none of {words}: {r['message']}"
        if types:
            assert r["type"] in types[0], f"{name}: raised {r['type']}, expected one of {types[0]}: {r['message']}"
