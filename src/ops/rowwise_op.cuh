// Validation, planning and dtype dispatch shared by every op that maps rows to rows of the
// same shape (softmax family today; norms reuse it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "ops/checks.hpp"
#include "ops/row_launch.cuh"
#include "plan/reduction_plan.hpp"
#include "plan/row_kernel_plan.hpp"

namespace reducekit {

template <int NIN> struct RowwiseTensors {
  TensorView in[NIN];
  const char* in_name[NIN];
  TensorView out;
  const char* out_name;
};

namespace detail {

template <typename T, template <typename> class OpFor, int NIN>
Status dispatch_rowwise(const RowwiseTensors<NIN>& t, const RowwisePlan (&plans)[NIN + 1],
                        const RowKernelConfig& config, bool aligned, cudaStream_t stream) {
  const void* in[NIN];
  for (int i = 0; i < NIN; ++i) in[i] = t.in[i].data;
  const kernels::RowArgs<T, NIN> args = row_args<T, NIN>(in, plans, t.out.data, plans[NIN]);
  return launch_row_op<T, OpFor<T>>(args, config, aligned, stream);
}

}  // namespace detail

// Runs OpFor<T> over `dim` of the inputs, writing `out`. All tensors share shape and dtype.
template <template <typename> class OpFor, int NIN>
Status run_rowwise(const RowwiseTensors<NIN>& t, int64_t dim, cudaStream_t stream) {
  for (int i = 0; i < NIN; ++i) {
    REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t.in[i], t.in_name[i]));
    if (i > 0) REDUCEKIT_RETURN_IF_ERROR(check_matches(t.in[i], t.in_name[i], t.in[0], t.in_name[0]));
  }
  REDUCEKIT_RETURN_IF_ERROR(check_float_device_tensor(t.out, t.out_name));
  REDUCEKIT_RETURN_IF_ERROR(check_matches(t.out, t.out_name, t.in[0], t.in_name[0]));
  for (int i = 0; i < NIN; ++i)
    REDUCEKIT_RETURN_IF_ERROR(check_no_partial_overlap(t.out, t.out_name, t.in[i], t.in_name[i]));

  RowwisePlan plans[NIN + 1];
  for (int i = 0; i <= NIN; ++i) {
    const TensorView& v = i < NIN ? t.in[i] : t.out;
    const char* name = i < NIN ? t.in_name[i] : t.out_name;
    REDUCEKIT_RETURN_IF_ERROR(plan_rowwise(v, dim, &plans[i]));
    if (!plans[i].row_major)
      return Status::unsupported(std::string(name) +
                                 ": the dim must be innermost (stride 1) with the other dims mergeable into rows;"
                                 " make the tensor contiguous first");
  }
  const int64_t rows = plans[0].rows, cols = plans[0].cols;
  if (rows == 0 || cols == 0) return Status::ok();
  if (cols > kMaxRowLength)
    return Status::unsupported(std::string(t.in_name[0]) + ": rows longer than " + std::to_string(kMaxRowLength) +
                               " elements are not supported");

  // 16-byte accesses need every row start of every array aligned. The plan does not depend
  // on it (results stay batch-invariant); only how the kernel moves bytes does.
  const int elem_bytes = static_cast<int>(dtype_size(t.in[0].dtype));
  const int vec = 16 / elem_bytes;
  bool aligned = true;
  for (int i = 0; i <= NIN; ++i) {
    const TensorView& v = i < NIN ? t.in[i] : t.out;
    aligned = aligned && reinterpret_cast<uintptr_t>(v.data) % 16 == 0 && (rows == 1 || plans[i].row_stride % vec == 0);
  }
  RowKernelLimits limits;
  REDUCEKIT_RETURN_IF_ERROR(row_kernel_limits(&limits));
  // With 32 values a thread, softmax's direct loads keep enough bytes in flight while tiles are
  // small (several CTAs an SM); the ring pays only from 32 KB tiles, 1-2 CTAs an SM (run 11:
  // bf16 32768x4096 3583 direct vs 3341 ring, 4096x32768 2663 direct vs 3324 ring).
  limits.ring_min_tile_bytes = 32 * 1024;
  const RowKernelConfig config = plan_row_kernel(cols, elem_bytes, NIN, limits);

  switch (t.in[0].dtype) {
    case DType::kFloat32: return detail::dispatch_rowwise<float, OpFor>(t, plans, config, aligned, stream);
    case DType::kFloat16: return detail::dispatch_rowwise<__half, OpFor>(t, plans, config, aligned, stream);
    case DType::kBFloat16:
      return detail::dispatch_rowwise<__nv_bfloat16, OpFor>(t, plans, config, aligned, stream);
    case DType::kFloat64: return detail::dispatch_rowwise<double, OpFor>(t, plans, config, aligned, stream);
    default: return Status::invalid_argument(std::string(t.in_name[0]) + ": unsupported dtype");
  }
}

}  // namespace reducekit
