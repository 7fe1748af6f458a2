// SPDX-License-Identifier: Apache-2.0
// cross_entropy = log_softmax + NLL with ignore_index and label smoothing, torch's formulas.
#include <vector>

#include "reference/reference.hpp"

namespace reducekit::reference {
namespace {

bool valid_arguments(const int64_t* targets, int64_t rows, int64_t classes,
                     const CrossEntropyOptions& options) {
  // Written so that a NaN label_smoothing is rejected too.
  if (!(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0)) return false;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = targets[r];
    if (t != options.ignore_index && (t < 0 || t >= classes)) return false;
  }
  return true;
}

int64_t count_kept(const int64_t* targets, int64_t rows, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) count += targets[r] != ignore_index;
  return count;
}

}  // namespace

bool cross_entropy_forward(const double* logits, const int64_t* targets, double* loss, int64_t rows,
                           int64_t classes, const CrossEntropyOptions& options) {
  if (!valid_arguments(targets, rows, classes, options)) return false;
  const double ls = options.label_smoothing;
  std::vector<double> logp(static_cast<size_t>(classes));
  CompensatedSum total;
  for (int64_t r = 0; r < rows; ++r) {
    double row_loss = 0.0;  // ignored rows contribute exactly 0
    if (targets[r] != options.ignore_index) {
      log_softmax_rows(logits + r * classes, logp.data(), 1, classes);
      row_loss = -logp[targets[r]];
      if (ls > 0.0) {  // torch forms the smoothing term only then (so 0 * inf never appears)
        CompensatedSum logp_sum;
        for (double v : logp) logp_sum.add(v);
        row_loss = (1.0 - ls) * row_loss + (ls / static_cast<double>(classes)) * -logp_sum.value();
      }
    }
    if (options.reduction == LossReduction::kNone) loss[r] = row_loss;
    total.add(row_loss);
  }
  if (options.reduction == LossReduction::kSum) loss[0] = total.value();
  if (options.reduction == LossReduction::kMean)
    loss[0] = total.value() / static_cast<double>(count_kept(targets, rows, options.ignore_index));
  return true;
}

bool cross_entropy_backward(const double* logits, const int64_t* targets, const double* dloss,
                            double* dlogits, int64_t rows, int64_t classes,
                            const CrossEntropyOptions& options) {
  if (!valid_arguments(targets, rows, classes, options)) return false;
  const double ls = options.label_smoothing;
  const double kept = static_cast<double>(count_kept(targets, rows, options.ignore_index));
  for (int64_t r = 0; r < rows; ++r) {
    double* g = dlogits + r * classes;
    if (targets[r] == options.ignore_index) {
      for (int64_t j = 0; j < classes; ++j) g[j] = 0.0;
      continue;
    }
    double scale = dloss[0];
    if (options.reduction == LossReduction::kNone) scale = dloss[r];
    if (options.reduction == LossReduction::kMean) scale = dloss[0] / kept;
    // d/dz_j of (1 - ls) * -logp_t + (ls / C) * -sum_k logp_k = p_j - (1 - ls) [j == t] - ls / C.
    softmax_rows(logits + r * classes, g, 1, classes);
    for (int64_t j = 0; j < classes; ++j) {
      const double target_part = j == targets[r] ? 1.0 - ls : 0.0;
      g[j] = scale * (g[j] - target_part - ls / static_cast<double>(classes));
    }
  }
  return true;
}

}  // namespace reducekit::reference
