// SPDX-License-Identifier: Apache-2.0
// torch's 'sum' and 'mean' of the per-row cross-entropy losses in one CTA: a launch where the
// composed form took five (the sum, the kept rows' weights, their sum, the division, the cast).
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "kernels/numeric.cuh"

namespace reducekit::kernels {

// One CTA of a fixed size: thread i adds rows i, i + kThreads, ... in order, then cub's block
// sum combines the threads in a fixed tree, so the result's bits depend on the rows alone.
constexpr int kCrossEntropyReduceThreads = 512;

template <typename T> struct CrossEntropyReduceArgs {
  using Acc = acc_t<T>;
  const Acc* loss;       // [rows], or null (the denominator alone; out gets numerator / it)
  const int64_t* target;  // [rows], or null (class probabilities: every row counts 1)
  const Acc* weight;     // [classes], or null (every class weighs 1)
  int64_t classes;
  int64_t rows;
  int64_t ignore_index;
  bool mean;         // divide by the kept rows' weights (their count without weights)
  Acc numerator;     // with loss null: out = numerator / denominator
  T* out;            // one value
  Acc* denominator;  // one value (1 for the sum), or null
};

template <typename T>
__global__ void __launch_bounds__(kCrossEntropyReduceThreads)
    cross_entropy_reduce_kernel(const CrossEntropyReduceArgs<T> a) {
  using Acc = acc_t<T>;
  // A training step launches its fused kernel right behind this one, overlapping its tail.
  allow_next_launch();
  Acc total = Acc(0), kept = Acc(0);
  if (a.mean) {
#pragma unroll 4
    for (int64_t row = threadIdx.x; row < a.rows; row += kCrossEntropyReduceThreads) {
      if (a.target == nullptr) {
        kept += Acc(1);
      } else {
        const int64_t t = a.target[row];
        // A target outside [0, classes) has a NaN loss already: its weight only has to be readable.
        if (t != a.ignore_index) kept += a.weight != nullptr ? a.weight[t < 0 ? 0 : min(t, a.classes - 1)] : Acc(1);
      }
    }
  }
  if (a.loss != nullptr) {
    // The losses may come from the kernel ahead (a step's fused kernel, launched before it ends).
    wait_for_previous_grid();
#pragma unroll 4
    for (int64_t row = threadIdx.x; row < a.rows; row += kCrossEntropyReduceThreads) total += a.loss[row];
  }
  using BlockSum = cub::BlockReduce<Acc, kCrossEntropyReduceThreads>;
  __shared__ typename BlockSum::TempStorage storage;
  total = BlockSum(storage).Sum(total);
  __syncthreads();  // the storage is reused
  kept = BlockSum(storage).Sum(kept);
  if (threadIdx.x == 0) {
    const Acc denominator = a.mean ? kept : Acc(1);
    *a.out = from_acc<T>((a.loss != nullptr ? total : a.numerator) / denominator);
    if (a.denominator != nullptr) *a.denominator = denominator;
  }
}

}  // namespace reducekit::kernels
