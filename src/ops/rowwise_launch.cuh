// SPDX-License-Identifier: Apache-2.0
// The rowwise ops' launches (the kernels they instantiate): included only by the translation
// units CMake generates from rowwise.cu.in, one op and element type each.
#pragma once

#include "kernels/softmax_ops.cuh"
#include "ops/rowwise_op.cuh"
#include "ops/softmax_forward.cuh"

namespace reducekit::detail {

template <typename T, template <typename> class OpFor, int NIN>
Status dispatch_rowwise(const RowwiseTensors<NIN>& t, const RowwisePlan (&plans)[NIN + 1],
                        const RowKernelConfig& config, bool aligned, const RowSplitBuffers& split,
                        cudaStream_t stream) {
  const void* in[NIN];
  for (int i = 0; i < NIN; ++i) in[i] = t.in[i].data;
  const kernels::RowArgs<T, NIN> args = row_args<T, NIN>(in, plans, t.out.data, plans[NIN]);
  // Only ops that take a workspace (the one-input forward ops) instantiate the split kernel.
  constexpr RowFamily F = RowFamily::kRowwise;
  if constexpr (NIN == 1) return launch_row_op_split<F, T, OpFor<T>>(args, config, aligned, split, stream);
  else return launch_row_op<F, T, OpFor<T>>(args, config, aligned, stream);
}

}  // namespace reducekit::detail
