// amax and amin: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
namespace {
template <typename Acc> using MaxPolicy = kernels::ExtremumPolicy<Acc, true>;
template <typename Acc> using MinPolicy = kernels::ExtremumPolicy<Acc, false>;
}  // namespace

Status launch_amax(const ReduceLaunch& l, cudaStream_t stream) { return launch_for_dtype<MaxPolicy>(l, stream); }
Status launch_amin(const ReduceLaunch& l, cudaStream_t stream) { return launch_for_dtype<MinPolicy>(l, stream); }
}  // namespace reducekit
