// SPDX-License-Identifier: Apache-2.0
// The kernels of batch_norm's stages for a batch spread over ranks (SyncBatchNorm), around the
// single-GPU kernels of kernels/batch_norm.cuh:
//
//   batch_norm_packet_kernel          after batch_norm_stats_kernel: a warp a channel merges the
//                                     channel's partials (as the finalize kernel) into this rank's
//                                     packet row: (count, mean, M2) forward, (count, sum(dy),
//                                     sum(dy * xhat)) backward.
//   batch_norm_merge_moments_kernel   a thread a channel merges R ranks' moment packets in rank
//                                     order (Chan), then save_mean / save_invstd and the running
//                                     statistics as the finalize kernel makes them.
//   batch_norm_forward_params_kernel  the apply pass's parameters from given mean / invstd.
//   batch_norm_backward_params_kernel the apply pass's dx parameters from R ranks' gradient-sum
//                                     packets, summed in rank order.
//
// Packets are float64 whatever x's dtype: a count stays exact past 2^24 values a channel, and a
// packet is a few bytes a channel. The rank-order merge is a function of the packets alone, so
// every rank that gathers the same packets computes the same bits.
#pragma once

#include <cstdint>

#include "kernels/batch_norm.cuh"

namespace reducekit::kernels {

constexpr int kBatchNormPacketWidth = 3;  // mirrors reducekit::kBatchNormPacketWidth

// Writes channel ch's row of this rank's packet (lane 0 of the channel's warp). Backward: also
// the rank's own dweight / dbias where wanted (the same sums, in the accumulation type).
template <typename T, bool kBackward>
__global__ void __launch_bounds__(kBatchNormThreads) batch_norm_packet_kernel(const BatchNormArgs<acc_t<T>> a,
                                                                              double* packet) {
  using Acc = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t ch = blockIdx.x * int64_t(kBatchNormThreads / 32) + threadIdx.x / 32;
  if (ch >= a.c) return;
  const auto total = merge_channel_partials<T, kBackward>(a, ch, lane);
  if (lane != 0) return;
  double* row = packet + ch * kBatchNormPacketWidth;
  row[0] = static_cast<double>(a.n * a.s);
  if constexpr (kBackward) {
    // sum(dy * xhat) = invstd * sum(dy * (x - mean)): dweight's value.
    const Acc dy_xhat = total.dy_xc * a.invstd[ch];
    row[1] = static_cast<double>(total.dy);
    row[2] = static_cast<double>(dy_xhat);
    if (a.dbias != nullptr) a.dbias[ch] = total.dy;
    if (a.dweight != nullptr) a.dweight[ch] = dy_xhat;
  } else {
    row[1] = static_cast<double>(total.mean + channel_shift<T>(a, ch, a.channels_last));
    row[2] = static_cast<double>(total.m2);
  }
}

// Chan's merge in float64, rank after rank. A channel's statistics then finish in the
// accumulation type exactly as the single-GPU finalize does (finish_channel): one rank's packet
// passes the merge unchanged, so a one-rank group reproduces the single-GPU statistics of the
// three-pass path bit for bit. A total count of 0: save_mean / save_invstd NaN, running
// statistics untouched (as an empty single-GPU batch).
template <typename Acc>
__global__ void __launch_bounds__(kBatchNormThreads)
    batch_norm_merge_moments_kernel(const double* packets, int64_t ranks, int64_t c, Acc momentum, Acc eps,
                                    Acc* running_mean, Acc* running_var, Acc* save_mean, Acc* save_invstd) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  double n = 0, mean = 0, m2 = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    const double* row = packets + (r * c + ch) * kBatchNormPacketWidth;
    const double nb = row[0];
    if (nb == 0) continue;
    if (n == 0) {
      n = nb, mean = row[1], m2 = row[2];
      continue;
    }
    const double total = n + nb, wb = nb / total, delta = row[1] - mean;
    mean += delta * wb;
    m2 += row[2] + delta * delta * n * wb;
    n = total;
  }
  if (n == 0) {
    save_mean[ch] = Acc(NAN);
    save_invstd[ch] = Acc(NAN);
    return;
  }
  const Acc mean_acc = static_cast<Acc>(mean), m2_acc = static_cast<Acc>(m2);
  const Acc var = m2_acc / static_cast<Acc>(n);
  save_mean[ch] = mean_acc;
  save_invstd[ch] = Acc(1) / sqrt(var + eps);
  if (running_mean != nullptr) {
    const Acc keep = Acc(1) - momentum;
    running_mean[ch] = keep * running_mean[ch] + momentum * mean_acc;
    running_var[ch] = keep * running_var[ch] + momentum * (m2_acc / static_cast<Acc>(n - 1));
  }
}

// Channel ch's parameters (mean, weight * invstd, 0, bias): the apply kernel's y = p * (x - mean) + r.
template <typename Acc>
__global__ void __launch_bounds__(kBatchNormThreads)
    batch_norm_forward_params_kernel(int64_t c, const Acc* mean, const Acc* invstd, const Acc* weight,
                                     const Acc* bias, Acc* params) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  store_params(params, c, ch,
               ChannelParams<Acc>{mean[ch], (weight != nullptr ? weight[ch] : Acc(1)) * invstd[ch], Acc(0),
                                  bias != nullptr ? bias[ch] : Acc(0)});
}

// dx = k * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n), k = weight * invstd, n and the sums
// over every rank: channel ch's parameters (mean, -k * invstd * sum(dy * xhat) / n, k, -k * sum(dy) / n).
template <typename Acc>
__global__ void __launch_bounds__(kBatchNormThreads)
    batch_norm_backward_params_kernel(const double* packets, int64_t ranks, int64_t c, const Acc* mean,
                                      const Acc* invstd, const Acc* weight, Acc* params) {
  const int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (ch >= c) return;
  double n = 0, dy = 0, dy_xhat = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    const double* row = packets + (r * c + ch) * kBatchNormPacketWidth;
    n += row[0];
    dy += row[1];
    dy_xhat += row[2];
  }
  const Acc is = invstd[ch];
  const Acc k = (weight != nullptr ? weight[ch] : Acc(1)) * is;
  const Acc mean_dy = static_cast<Acc>(dy / n), mean_dy_xhat = static_cast<Acc>(dy_xhat / n);
  store_params(params, c, ch, ChannelParams<Acc>{mean[ch], -k * is * mean_dy_xhat, k, -k * mean_dy});
}

}  // namespace reducekit::kernels
