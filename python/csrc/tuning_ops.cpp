// SPDX-License-Identifier: Apache-2.0
// torch.ops.reducekit._set_tuning / _clear_tuning: the planner overrides of reducekit/tuning.hpp,
// for benchmark sweeps (bench/bench.py --tune). Private: plans made under them are not the ones
// that ship.
#include <torch/library.h>

#include <optional>
#include <string>

#include "reducekit/tuning.hpp"
#include "torch_util.hpp"

namespace {

void set_tuning_op(c10::string_view name, std::optional<int64_t> value) {
  reducekit_torch::throw_if_failed(reducekit::set_tuning(std::string(name), value));
}

void clear_tuning_op() { reducekit::clear_tuning(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(reducekit, m) {
  m.def("_set_tuning(str name, int? value) -> ()", &set_tuning_op);
  m.def("_clear_tuning() -> ()", &clear_tuning_op);
}
