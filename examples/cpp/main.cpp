// SPDX-License-Identifier: Apache-2.0
// softmax and layer_norm over the rows of a [rows, cols] float32 matrix in device memory, with
// reducekit's C++ API: views over raw pointers, a stream, and a Status instead of exceptions.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include <reducekit/reducekit.hpp>

namespace {

int fail(const char* what, const reducekit::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
  return 1;
}

}  // namespace

int main() {
  std::printf("reducekit %d.%d.%d\n", REDUCEKIT_VERSION_MAJOR, REDUCEKIT_VERSION_MINOR, REDUCEKIT_VERSION_PATCH);
  const int64_t rows = 4, cols = 1000;
  std::vector<float> host(rows * cols);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 17) * 0.25f;

  float *x = nullptr, *y = nullptr;
  if (cudaMalloc(&x, host.size() * sizeof(float)) != cudaSuccess ||
      cudaMalloc(&y, host.size() * sizeof(float)) != cudaSuccess) {
    std::printf("no CUDA device: nothing to run (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  cudaMemcpy(x, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);

  const reducekit::TensorView xv = reducekit::make_contiguous_view(x, reducekit::DType::kFloat32, {rows, cols}, 0);
  const reducekit::TensorView yv = reducekit::make_contiguous_view(y, reducekit::DType::kFloat32, {rows, cols}, 0);
  cudaStream_t stream = nullptr;

  reducekit::Status s = reducekit::softmax(xv, yv, /*dim=*/-1, stream);
  if (!s.is_ok()) return fail("softmax", s);
  cudaMemcpy(host.data(), y, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
  double row_sum = 0;
  for (int64_t c = 0; c < cols; ++c) row_sum += host[c];
  std::printf("softmax: row 0 sums to %.6f\n", row_sum);

  s = reducekit::layer_norm(xv, reducekit::NormShape::of({cols}), /*weight=*/nullptr, /*bias=*/nullptr, 1e-5, yv,
                            /*mean=*/nullptr, /*rstd=*/nullptr, stream);
  if (!s.is_ok()) return fail("layer_norm", s);

  // A bad argument comes back as a Status naming it, never a crash.
  s = reducekit::softmax(xv, yv, /*dim=*/2, stream);
  std::printf("softmax over dim 2 of a matrix: %s\n", s.message().c_str());

  cudaFree(x);
  cudaFree(y);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
