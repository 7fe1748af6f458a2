// SPDX-License-Identifier: Apache-2.0
// cross_entropy = log_softmax + NLL with ignore_index, class weights and label smoothing (torch's
// formulas), plus a z-loss term and logit soft-capping as large-model training uses them.
#include <cmath>
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

// The denominator of kMean: sum of w[t] over the kept rows (their count without weights).
double kept_weight(const int64_t* targets, int64_t rows, const CrossEntropyOptions& options) {
  CompensatedSum total;
  for (int64_t r = 0; r < rows; ++r)
    if (targets[r] != options.ignore_index) total.add(options.weight ? options.weight[targets[r]] : 1.0);
  return total.value();
}

double class_weight(const CrossEntropyOptions& options, int64_t j) { return options.weight ? options.weight[j] : 1.0; }

// z = softcap * tanh(x / softcap), or x.
void capped_row(const double* x, double* z, int64_t classes, double softcap) {
  for (int64_t j = 0; j < classes; ++j) z[j] = softcap > 0.0 ? softcap * std::tanh(x[j] / softcap) : x[j];
}

}  // namespace

bool cross_entropy_forward(const double* logits, const int64_t* targets, double* loss, int64_t rows,
                           int64_t classes, const CrossEntropyOptions& options) {
  if (!valid_arguments(targets, rows, classes, options)) return false;
  const double ls = options.label_smoothing;
  std::vector<double> z(static_cast<size_t>(classes)), logp(static_cast<size_t>(classes));
  CompensatedSum total;
  for (int64_t r = 0; r < rows; ++r) {
    double row_loss = 0.0;  // ignored rows contribute exactly 0
    const int64_t t = targets[r];
    if (t != options.ignore_index) {
      capped_row(logits + r * classes, z.data(), classes, options.softcap);
      log_softmax_rows(z.data(), logp.data(), 1, classes);
      row_loss = class_weight(options, t) * -logp[t];
      if (ls > 0.0) {  // torch forms the smoothing term only then (so 0 * inf never appears)
        CompensatedSum smooth;
        for (int64_t j = 0; j < classes; ++j) smooth.add(class_weight(options, j) * -logp[j]);
        row_loss = (1.0 - ls) * row_loss + (ls / static_cast<double>(classes)) * smooth.value();
      }
      if (options.lse_square_scale != 0.0) {
        const double lse = z[t] - logp[t];
        row_loss += options.lse_square_scale * lse * lse;
      }
    }
    if (options.reduction == LossReduction::kNone) loss[r] = row_loss;
    total.add(row_loss);
  }
  if (options.reduction == LossReduction::kSum) loss[0] = total.value();
  if (options.reduction == LossReduction::kMean) loss[0] = total.value() / kept_weight(targets, rows, options);
  return true;
}

bool cross_entropy_backward(const double* logits, const int64_t* targets, const double* dloss,
                            double* dlogits, int64_t rows, int64_t classes,
                            const CrossEntropyOptions& options) {
  if (!valid_arguments(targets, rows, classes, options)) return false;
  const double ls = options.label_smoothing, c = options.softcap;
  const double kept = kept_weight(targets, rows, options);
  CompensatedSum weight_sum;  // sum_j w[j]: the smoothing term's softmax factor
  for (int64_t j = 0; j < classes; ++j) weight_sum.add(class_weight(options, j));
  std::vector<double> z(static_cast<size_t>(classes)), logp(static_cast<size_t>(classes));
  for (int64_t r = 0; r < rows; ++r) {
    double* g = dlogits + r * classes;
    const int64_t t = targets[r];
    if (t == options.ignore_index) {
      for (int64_t j = 0; j < classes; ++j) g[j] = 0.0;
      continue;
    }
    double scale = dloss[0];
    if (options.reduction == LossReduction::kNone) scale = dloss[r];
    if (options.reduction == LossReduction::kMean) scale = dloss[0] / kept;
    capped_row(logits + r * classes, z.data(), classes, c);
    log_softmax_rows(z.data(), logp.data(), 1, classes);
    const double lse = z[t] - logp[t];
    // d/dz_j: (1 - ls) w[t] (p_j - [j == t]) + (ls / C) (sum_k w[k] p_j - w[j]) + 2 s lse p_j;
    // then dz/dx = 1 - (z / softcap)^2 under the cap.
    const double wt = (1.0 - ls) * class_weight(options, t), smooth = ls / static_cast<double>(classes);
    for (int64_t j = 0; j < classes; ++j) {
      const double p = std::exp(logp[j]);
      double dz = wt * (p - (j == t ? 1.0 : 0.0)) + 2.0 * options.lse_square_scale * lse * p;
      if (ls > 0.0) dz += smooth * (weight_sum.value() * p - class_weight(options, j));
      const double dx = c > 0.0 ? dz * (1.0 - (z[j] / c) * (z[j] / c)) : dz;
      g[j] = scale * dx;
    }
  }
  return true;
}

bool cross_entropy_probs_forward(const double* logits, const double* targets, double* loss, int64_t rows,
                                 int64_t classes, const CrossEntropyOptions& options) {
  const double ls = options.label_smoothing;
  if (!(ls >= 0.0 && ls <= 1.0)) return false;
  std::vector<double> z(static_cast<size_t>(classes)), logp(static_cast<size_t>(classes));
  CompensatedSum total;
  for (int64_t r = 0; r < rows; ++r) {
    capped_row(logits + r * classes, z.data(), classes, options.softcap);
    log_softmax_rows(z.data(), logp.data(), 1, classes);
    CompensatedSum row;
    for (int64_t j = 0; j < classes; ++j) {
      const double q = (1.0 - ls) * targets[r * classes + j] + ls / static_cast<double>(classes);
      row.add(class_weight(options, j) * q * -logp[j]);
    }
    double row_loss = row.value();
    if (options.lse_square_scale != 0.0 && classes > 0) {
      const double lse = z[0] - logp[0];
      row_loss += options.lse_square_scale * lse * lse;
    }
    if (options.reduction == LossReduction::kNone) loss[r] = row_loss;
    total.add(row_loss);
  }
  if (options.reduction == LossReduction::kSum) loss[0] = total.value();
  if (options.reduction == LossReduction::kMean) loss[0] = total.value() / static_cast<double>(rows);
  return true;
}

bool cross_entropy_probs_backward(const double* logits, const double* targets, const double* dloss,
                                  double* dlogits, double* dtargets, int64_t rows, int64_t classes,
                                  const CrossEntropyOptions& options) {
  const double ls = options.label_smoothing, c = options.softcap;
  if (!(ls >= 0.0 && ls <= 1.0)) return false;
  std::vector<double> z(static_cast<size_t>(classes)), logp(static_cast<size_t>(classes)),
      wq(static_cast<size_t>(classes));
  for (int64_t r = 0; r < rows; ++r) {
    double scale = dloss[0];
    if (options.reduction == LossReduction::kNone) scale = dloss[r];
    if (options.reduction == LossReduction::kMean) scale = dloss[0] / static_cast<double>(rows);
    capped_row(logits + r * classes, z.data(), classes, c);
    log_softmax_rows(z.data(), logp.data(), 1, classes);
    CompensatedSum mass;
    for (int64_t j = 0; j < classes; ++j) {
      wq[j] = class_weight(options, j) * ((1.0 - ls) * targets[r * classes + j] + ls / static_cast<double>(classes));
      mass.add(wq[j]);
    }
    const double lse = classes > 0 ? z[0] - logp[0] : 0.0;
    // d/dz_j of sum_k wq[k] (lse - z[k]) + s lse^2: (mass + 2 s lse) p_j - wq[j]; then the cap's dz/dx.
    for (int64_t j = 0; j < classes; ++j) {
      const double dz = (mass.value() + 2.0 * options.lse_square_scale * lse) * std::exp(logp[j]) - wq[j];
      dlogits[r * classes + j] = scale * (c > 0.0 ? dz * (1.0 - (z[j] / c) * (z[j] / c)) : dz);
      if (dtargets) dtargets[r * classes + j] = -scale * (1.0 - ls) * class_weight(options, j) * logp[j];
    }
  }
  return true;
}

}  // namespace reducekit::reference
