#include "plan/row_kernel_plan.hpp"

#include <algorithm>

namespace reducekit {
namespace {

constexpr int kWarpThreads = 128;
constexpr int kMinBlockThreads = 128;
constexpr int kTargetVectorsPerThread = 4;  // 64 bytes in flight per thread per input
constexpr int kMaxVectorBytesPerThread = 64;  // 4 x 16-byte vectors: more spills at 1024 threads
constexpr int kPortableCluster = 8;
constexpr std::size_t kMaxStashBytes = 200 * 1024;  // leaves room for a second CTA's reduction slots

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

RowKernelConfig plan_row_kernel(int64_t cols, int elem_bytes, int inputs, const RowKernelLimits& limits) {
  RowKernelConfig c;
  c.vec = std::max(1, 16 / elem_bytes);
  const int vector_bytes = c.vec * elem_bytes;
  const int max_vpt = std::max(1, kMaxVectorBytesPerThread / (vector_bytes * inputs));
  const int64_t vectors = std::max<int64_t>(1, ceil_div(cols, c.vec));

  // Short rows: at most one warp each, several rows per CTA, no block barrier.
  if (vectors <= 32 * max_vpt) {
    c.kind = RowKernelKind::kWarp;
    c.threads = kWarpThreads;
    c.lanes = std::clamp(pow2_ceil(vectors), 4, 32);
    c.vpt = static_cast<int>(pow2_ceil(ceil_div(vectors, 32)));
    return c;
  }

  c.kind = RowKernelKind::kBlock;
  const int target = std::min(kTargetVectorsPerThread, max_vpt);
  const int max_threads = std::max(kMinBlockThreads, limits.max_block_threads);
  c.threads = std::clamp(pow2_ceil(ceil_div(vectors, target)), kMinBlockThreads, max_threads);
  const int64_t per_thread = ceil_div(vectors, c.threads);
  if (per_thread <= max_vpt) {
    c.vpt = pow2_ceil(per_thread);
    return c;
  }

  // Longer than one CTA's registers: a cluster of CTAs, each with one register tile ...
  c.vpt = max_vpt;
  const int64_t tile_vectors = int64_t(c.threads) * c.vpt;
  const int64_t total_tiles = ceil_div(vectors, tile_vectors);
  const int portable = std::min(kPortableCluster, std::max(1, limits.max_cluster));
  if (total_tiles <= portable) {
    c.cluster = static_cast<int>(total_tiles);
    return c;
  }
  // ... and more tiles parked in shared memory. Past the portable cluster size, 16-CTA
  // clusters are used only where they keep the whole row on chip when 8 would not.
  const std::size_t tile_bytes = std::size_t(tile_vectors) * vector_bytes * inputs;
  const std::size_t stash_bytes = std::min(limits.max_smem_per_block, kMaxStashBytes);
  const int64_t on_chip_tiles = 1 + static_cast<int64_t>(stash_bytes / tile_bytes);
  c.cluster = portable;
  if (ceil_div(total_tiles, c.cluster) > on_chip_tiles && limits.max_cluster > portable) c.cluster = limits.max_cluster;
  c.tiles = static_cast<int>(ceil_div(total_tiles, c.cluster));
  c.stash_tiles = static_cast<int>(std::min<int64_t>(c.tiles - 1, stash_bytes / tile_bytes));
  c.smem_bytes = c.stash_tiles * tile_bytes;
  return c;
}

}  // namespace reducekit
