// SPDX-License-Identifier: Apache-2.0
// The norm forwards' launches (the kernels they instantiate): included only by the translation
// units CMake generates from norm_forward.cu.in, one op and element type each.
#pragma once

#include "ops/norm_launch.cuh"

namespace reducekit::norm_detail {

// A staged plan's launch (norm_staged.cuh): the plain rms_norm and layer_norm forwards of 16-bit
// and float32 rows, any alignment.
template <typename T, class Op>
Status launch_staged_forward(const kernels::RowArgs<T, Op::kInputs>& args, const RowKernelConfig& c,
                             const kernels::NormExtra<T>& extra, cudaStream_t stream) {
  if constexpr (kernels::IsStagedNorm<Op>::value && sizeof(T) <= 4) {
    REDUCEKIT_RETURN_IF_ERROR(detail::check_staged_launch(c, args.rows, "x"));
    // 512-thread CTAs only: 256-thread ones lost at every measured row (bench/results/LOG.md).
    if (c.threads != kStagedThreads) return Status::unsupported("row plan: staged CTAs of an uninstantiated size");
    return detail::launch_blocks(kernels::norm_staged_kernel<T, Op, kStagedThreads>, args.rows * c.cluster, c, stream,
                                 "norm_staged_kernel", args, extra);
  } else {
    return Status::unsupported("row plan: staged rows are planned for the plain rms_norm and layer_norm forwards "
                               "of 16-bit and float32 x");
  }
}

template <template <typename, bool> class OpFor, bool kResidual, typename T>
Status launch_forward(const ForwardCall& c, const RowwisePlan (&plans)[4], bool params_f32,
                      const RowKernelConfig& config, bool aligned, cudaStream_t stream) {
  using Op = OpFor<T, kResidual>;
  RowSplitBuffers split;
  REDUCEKIT_RETURN_IF_ERROR(split_buffers(c.workspace, config, plans[0].rows, sizeof(typename Op::Stat), &split));
  constexpr int NIN = Op::kInputs;
  const void* in[NIN];
  in[0] = c.x->data;
  if constexpr (NIN == 2) in[1] = c.residual->data;
  kernels::RowArgs<T, NIN> args = row_args<T, NIN>(in, plans, c.y->data, plans[2]);
  args.input_alone_shifted = !aligned && NIN == 1 && aligned_ptr(c.weight) && aligned_ptr(c.bias) &&
                             rows_on_granules(c.y->data, plans[2].rows, plans[2].row_stride, sizeof(T));
  kernels::NormExtra<T> extra;
  using Acc = kernels::acc_t<T>;
  extra.weight = c.weight != nullptr ? c.weight->data : nullptr;
  extra.bias = c.bias != nullptr ? c.bias->data : nullptr;
  extra.params_f32 = params_f32;
  extra.eps = static_cast<Acc>(c.eps);
  extra.mean = c.mean != nullptr ? static_cast<Acc*>(c.mean->data) : nullptr;
  extra.rstd = c.rstd != nullptr ? static_cast<Acc*>(c.rstd->data) : nullptr;
  if (c.sum != nullptr) {
    extra.sum = static_cast<T*>(c.sum->data);
    extra.sum_stride = plans[3].row_stride;
  }
  if (config.kind == RowKernelKind::kStaged) return launch_staged_forward<T, Op>(args, config, extra, stream);
  return launch_row_op_split<kForwardFamily<OpFor, kResidual>, T, Op>(args, config, aligned, split, stream, extra);
}

}  // namespace reducekit::norm_detail
