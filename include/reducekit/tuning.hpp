// SPDX-License-Identifier: Apache-2.0
// Planner overrides for benchmark sweeps and tests: process-wide values that replace, by name,
// a setting the policy tables ship (src/plan). They are set by explicit calls only (the
// benchmark's --tune, torch.ops.reducekit._set_tuning, a test's ScopedTuning), never read from
// the environment. A plan made while one is set is not the one that ships, and its results may
// differ in the last bits from the shipped plan's (still deterministic for one setting).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "reducekit/status.hpp"

namespace reducekit {

// Sets `name` (one of tuning_names()) to `value`, or back to the shipped setting (nullopt).
// An unknown name is an invalid_argument naming it.
Status set_tuning(const std::string& name, std::optional<int64_t> value);

// Every override back to the shipped setting.
void clear_tuning();

// The override of `name`, if one is set.
std::optional<int64_t> tuning(const char* name);

// The names set_tuning takes, comma-separated.
std::string tuning_names();

}  // namespace reducekit
