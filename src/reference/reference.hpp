// SPDX-License-Identifier: Apache-2.0
// reducekit::reference: the float64 CPU oracle every GPU kernel is checked against.
// Used by tests only, never by the library. Clarity over speed; semantics follow PyTorch exactly,
// including NaN propagation, -inf handling, tie-breaking and empty sets (deviations are noted).
// All arrays are dense, row-major, caller-allocated; extents are int64. Functions returning bool
// return false, and write nothing, on arguments torch would reject.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace reducekit::reference {

using Shape = std::vector<int64_t>;  // sizes of a dense row-major tensor, rank <= kMaxReferenceRank
using Dims = std::vector<int64_t>;   // dims to reduce; negative dims count from the end, as in torch

constexpr int64_t kMaxReferenceRank = 8;

// ---- summation -----------------------------------------------------------------------------
// Neumaier-compensated sum, so the oracle's own rounding error stays near one ulp of the result
// even for 2^20-term sums. inf and NaN propagate exactly as in a plain left-to-right sum.
class CompensatedSum {
 public:
  void add(double v) {
    const double t = sum_ + v;
    // The smaller operand is the one whose low bits were lost in t.
    compensation_ += std::fabs(sum_) >= std::fabs(v) ? (sum_ - t) + v : (v - t) + sum_;
    sum_ = t;
  }
  // Once the running sum is inf or NaN the compensation is meaningless (inf - inf), so report the
  // plain sum, which is what torch would give.
  double value() const { return std::isfinite(sum_) ? sum_ + compensation_ : sum_; }

 private:
  double sum_ = 0.0;
  double compensation_ = 0.0;
};

// ---- softmax family over the last dim of a [rows, cols] array --------------------------------
// torch's formula exp(x - max) / sum: an all -inf row, or a row holding +inf or NaN, gives NaN.
void softmax_rows(const double* x, double* y, int64_t rows, int64_t cols);
// x - max - log(sum(exp(x - max))); NaN in the same cases as softmax_rows.
void log_softmax_rows(const double* x, double* y, int64_t rows, int64_t cols);
// dx = y * (dy - sum(dy * y)), y the softmax output.
void softmax_backward_rows(const double* y, const double* dy, double* dx, int64_t rows, int64_t cols);
// dx = dy - exp(y) * sum(dy), y the log_softmax output.
void log_softmax_backward_rows(const double* y, const double* dy, double* dx, int64_t rows,
                               int64_t cols);

// The same four over any one dim of a dense tensor (false on a bad shape or dim).
bool softmax_dim(const double* x, double* y, const Shape& shape, int64_t dim);
bool log_softmax_dim(const double* x, double* y, const Shape& shape, int64_t dim);
bool softmax_backward_dim(const double* y, const double* dy, double* dx, const Shape& shape,
                          int64_t dim);
bool log_softmax_backward_dim(const double* y, const double* dy, double* dx, const Shape& shape,
                              int64_t dim);

// ---- reductions over any set of dims ---------------------------------------------------------
// `dims` is taken literally: empty reduces nothing (each output is a set of one element); pass
// all_dims(rank) for torch's dim=None. Order in `dims` does not matter; duplicates, dims out of
// range, rank > 8 or negative sizes are rejected. A rank-0 tensor accepts dim 0 / -1, as torch.
// Outputs are dense, numel(reduced_shape(...)) elements in row-major order of the kept dims;
// keepdim only changes the shape reported by reduced_shape.
// "Reduced set" = the elements one output reduces, ordered row-major over the reduced dims
// (ascending), which is also what argmax/argmin index into (a flat index when all dims reduce).

Dims all_dims(int64_t rank);  // {0, 1, ..., rank - 1}
int64_t numel(const Shape& shape);
// Output shape of a reduction; false on invalid shape/dims.
bool reduced_shape(const Shape& shape, const Dims& dims, bool keepdim, Shape* out);

// Input offsets of every reduced set: element k of output o's set sits at
// output_offsets[o] + reduced_offsets[k]. Exposed so tests can build their own loops.
struct ReductionLayout {
  std::vector<int64_t> output_offsets;
  std::vector<int64_t> reduced_offsets;
};
bool make_reduction_layout(const Shape& shape, const Dims& dims, ReductionLayout* layout);

// Empty reduced set: sum 0, prod 1, mean NaN, logsumexp -inf. NaN propagates through all of them.
bool sum(const double* x, const Shape& shape, const Dims& dims, double* y);
bool mean(const double* x, const Shape& shape, const Dims& dims, double* y);
bool prod(const double* x, const Shape& shape, const Dims& dims, double* y);
// log(sum(exp(x - m))) + m with m = max, replaced by 0 where it is +-inf (torch's formula):
// all -inf gives -inf, any +inf gives +inf, NaN gives NaN.
bool logsumexp(const double* x, const Shape& shape, const Dims& dims, double* y);
// amax/amin/argmax/argmin return false on an empty reduced set (torch raises).
// Any NaN in the set makes amax/amin NaN; argmax/argmin return the first NaN's index, else the
// first index of the extreme value.
bool amax(const double* x, const Shape& shape, const Dims& dims, double* y);
bool amin(const double* x, const Shape& shape, const Dims& dims, double* y);
bool argmax(const double* x, const Shape& shape, const Dims& dims, int64_t* y);
bool argmin(const double* x, const Shape& shape, const Dims& dims, int64_t* y);
// Two-pass moments: mean, then M2 = sum((x - mean)^2); var = M2 / max(0, n - correction), so
// n - correction <= 0 gives inf (M2 > 0) or NaN (M2 == 0); an empty set gives NaN; std = sqrt(var).
bool var(const double* x, const Shape& shape, const Dims& dims, double correction, double* y);
bool std(const double* x, const Shape& shape, const Dims& dims, double correction, double* y);
bool var_mean(const double* x, const Shape& shape, const Dims& dims, double correction,
              double* var_out, double* mean_out);
bool std_mean(const double* x, const Shape& shape, const Dims& dims, double correction,
              double* std_out, double* mean_out);

// ---- reduction backward: dy and y have the output layout, dx the input's ---------------------
bool sum_backward(const double* dy, const Shape& shape, const Dims& dims, double* dx);
bool mean_backward(const double* dy, const Shape& shape, const Dims& dims, double* dx);
// dx_i = dy * prod_{j != i} x_j (exclusive products: exact with zeros). torch uses dy * y / x
// when the tensor holds no zero, which differs only by rounding, or with inf inputs (NaN there).
bool prod_backward(const double* x, const double* dy, const Shape& shape, const Dims& dims,
                   double* dx);
// dx = dy * exp(x - y), y the logsumexp output.
bool logsumexp_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                        const Dims& dims, double* dx);
// dy split evenly among the elements equal to y (the amax/amin output): (dy / count) * mask.
// A NaN result matches nothing, so count is 0 and the whole set gets NaN, as torch's amax.
bool amax_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                   const Dims& dims, double* dx);
bool amin_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                   const Dims& dims, double* dx);
// dx = 2 / (n - correction) * dy * (x - mean), torch's formula with dims (for n - correction <= 0
// this gives +-inf/NaN/negative values; torch's dim=None path is not identical there).
bool var_backward(const double* x, const double* dy, const Shape& shape, const Dims& dims,
                  double correction, double* dx);
// var_backward of dy / (2 * y), with 0 where y == 0 (a constant set gets zero gradient), y = std.
bool std_backward(const double* x, const double* y, const double* dy, const Shape& shape,
                  const Dims& dims, double correction, double* dx);
// (var_mean / std_mean backward = var/std_backward + mean_backward; sum the two dx.)

// ---- layer_norm / rms_norm over the trailing `cols` of [rows, cols] ---------------------------
// weight, bias (each [cols]) may be nullptr; so may the mean/rstd outputs ([rows] each).
// cols == 0 gives NaN mean/rstd (0 / 0).
// A fused residual variant is the caller's s = x + residual followed by these.
// y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var_biased + eps).
void layer_norm_forward(const double* x, const double* weight, const double* bias, double* y,
                        double* mean, double* rstd, int64_t rows, int64_t cols, double eps);
// Takes the forward's mean/rstd, as torch's native_layer_norm_backward. Each output may be
// nullptr; dweight/dbias are sums over rows.
void layer_norm_backward(const double* x, const double* dy, const double* mean, const double* rstd,
                         const double* weight, double* dx, double* dweight, double* dbias,
                         int64_t rows, int64_t cols);
// y = x * rstd * weight + bias, rstd = 1 / sqrt(mean(x^2) + eps). eps is explicit (torch's
// eps=None means torch.finfo(dtype).eps). The overloads without bias / dbias pass nullptr.
void rms_norm_forward(const double* x, const double* weight, const double* bias, double* y, double* rstd,
                      int64_t rows, int64_t cols, double eps);
void rms_norm_forward(const double* x, const double* weight, double* y, double* rstd, int64_t rows,
                      int64_t cols, double eps);
// dbias (may be nullptr) is the column sums of dy.
void rms_norm_backward(const double* x, const double* dy, const double* rstd, const double* weight,
                       double* dx, double* dweight, double* dbias, int64_t rows, int64_t cols);
void rms_norm_backward(const double* x, const double* dy, const double* rstd, const double* weight,
                       double* dx, double* dweight, int64_t rows, int64_t cols);

// ---- batch_norm over [n, c, hw]: statistics per channel over n * hw elements ------------------
// weight/bias [c] may be nullptr. Training: save_mean/save_invstd [c] (may be nullptr),
// invstd = 1 / sqrt(biased var + eps); running_mean/running_var [c] (may be nullptr) are updated
// in place, r = (1 - momentum) * r + momentum * stat, with the unbiased variance (torch's
// momentum=None is momentum = 1 / num_batches_tracked, which the caller can pass).
// Returns false when n * hw == 1 (torch raises); with n * hw == 0 the output is empty, the running
// stats are left alone and save_mean/save_invstd are NaN.
bool batch_norm_train_forward(const double* x, const double* weight, const double* bias, double* y,
                              double* save_mean, double* save_invstd, double* running_mean,
                              double* running_var, int64_t n, int64_t c, int64_t hw,
                              double momentum, double eps);
// y = (x - running_mean) / sqrt(running_var + eps) * weight + bias.
void batch_norm_inference_forward(const double* x, const double* weight, const double* bias,
                                  const double* running_mean, const double* running_var,
                                  double* y, int64_t n, int64_t c, int64_t hw, double eps);
// Training-mode backward from the forward's save_mean/save_invstd; each output may be nullptr.
void batch_norm_backward(const double* x, const double* dy, const double* save_mean,
                         const double* save_invstd, const double* weight, double* dx,
                         double* dweight, double* dbias, int64_t n, int64_t c, int64_t hw);
// Layout helpers for channels-last tests: [n, hw, c] <-> [n, c, hw].
void channels_last_to_first(const double* x, double* y, int64_t n, int64_t c, int64_t hw);
void channels_first_to_last(const double* x, double* y, int64_t n, int64_t c, int64_t hw);

// ---- cross_entropy: logits [rows, classes], integer targets [rows] or probabilities -----------
enum class LossReduction { kNone, kMean, kSum };

struct CrossEntropyOptions {
  LossReduction reduction = LossReduction::kMean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1]
  const double* weight = nullptr;  // per-class weights [classes], or none (all 1)
  double lse_square_scale = 0.0;   // z-loss: adds scale * logsumexp(z)^2 to each kept row
  double softcap = 0.0;            // > 0: z = softcap * tanh(logits / softcap), else z = logits
};

// With z the (soft-capped) logits, logp = log_softmax(z), w the class weights and t the target,
// per kept row: (1 - ls) * w[t] * -logp[t] + (ls / C) * sum_j w[j] * -logp[j] + s * lse(z)^2;
// ignored rows are 0 (the smoothing term is only formed when ls > 0, as torch). kNone writes
// [rows], kSum/kMean write one value; kMean divides by sum of w[t] over the kept rows (their
// count without weights; 0/0 = NaN when all are ignored), as torch.
// False when a target is outside [0, classes) and not ignore_index, or ls is outside [0, 1].
bool cross_entropy_forward(const double* logits, const int64_t* targets, double* loss, int64_t rows,
                           int64_t classes, const CrossEntropyOptions& options = {});
// dlogits = scale * (softmax - (1 - ls) * onehot(target) - ls / C), 0 on ignored rows, where
// scale = dloss[row] (kNone), dloss[0] (kSum) or dloss[0] / non-ignored count (kMean).
bool cross_entropy_backward(const double* logits, const int64_t* targets, const double* dloss,
                            double* dlogits, int64_t rows, int64_t classes,
                            const CrossEntropyOptions& options = {});

// Class-probability targets [rows, classes] (options.ignore_index unused): with q = (1 - ls) *
// target + ls / C, per row sum_j w[j] * q[j] * -logp[j] + s * lse(z)^2, as torch's formula
// -(log_softmax * q * w).sum(class dim) (0 * -inf gives NaN there as here). kMean divides by
// rows. False when ls is outside [0, 1].
bool cross_entropy_probs_forward(const double* logits, const double* targets, double* loss, int64_t rows,
                                 int64_t classes, const CrossEntropyOptions& options = {});
// dlogits = scale * ((sum_k w[k] q[k] + 2 s lse) softmax - w q) (times the cap's derivative) and,
// where dtargets is not null, dtargets = -scale * (1 - ls) * w * logp; scale as
// cross_entropy_backward's, kMean's denominator rows.
bool cross_entropy_probs_backward(const double* logits, const double* targets, const double* dloss,
                                  double* dlogits, double* dtargets, int64_t rows, int64_t classes,
                                  const CrossEntropyOptions& options = {});

}  // namespace reducekit::reference
