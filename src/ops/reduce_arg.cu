// argmax and argmin: instantiations.
#include "ops/reduce_launch.cuh"

namespace reducekit {
namespace {
template <typename Acc> using ArgMaxPolicy = kernels::ArgExtremumPolicy<Acc, true>;
template <typename Acc> using ArgMinPolicy = kernels::ArgExtremumPolicy<Acc, false>;
}  // namespace

Status launch_argmax(const ReduceLaunch& l, cudaStream_t stream) { return launch_for_dtype<ArgMaxPolicy>(l, stream); }
Status launch_argmin(const ReduceLaunch& l, cudaStream_t stream) { return launch_for_dtype<ArgMinPolicy>(l, stream); }
}  // namespace reducekit
