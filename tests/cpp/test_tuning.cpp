// SPDX-License-Identifier: Apache-2.0
// Planner overrides (reducekit/tuning.hpp): set and reset by name, unknown names refused by name,
// and the column planner reading them.
#include <gtest/gtest.h>

#include "plan/reduce_config.hpp"
#include "reducekit/tuning.hpp"

namespace reducekit {
namespace {

TEST(Tuning, OverridesAreSetAndResetByName) {
  clear_tuning();
  EXPECT_FALSE(tuning("max_cluster").has_value());
  ASSERT_TRUE(set_tuning("max_cluster", 4).ok());
  ASSERT_TRUE(set_tuning("ring", 0).ok());
  EXPECT_EQ(tuning("max_cluster"), std::optional<int64_t>(4));
  EXPECT_EQ(tuning("ring"), std::optional<int64_t>(0));
  EXPECT_FALSE(tuning("block_elems").has_value());
  ASSERT_TRUE(set_tuning("max_cluster", std::nullopt).ok());
  EXPECT_FALSE(tuning("max_cluster").has_value());
  EXPECT_TRUE(tuning("ring").has_value()) << "resetting one name leaves the others";
  clear_tuning();
  EXPECT_FALSE(tuning("ring").has_value());
}

TEST(Tuning, UnknownNamesAreRefusedByName) {
  const Status s = set_tuning("max_clusters", 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'max_clusters'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max_cluster,"), std::string::npos) << "the message lists the names: " << s.message();
  EXPECT_FALSE(tuning("max_clusters").has_value());
}

TEST(Tuning, ColumnKnobsTakeTheOverrides) {
  clear_tuning();
  EXPECT_EQ(column_knobs().max_segments, ColumnKnobs{}.max_segments);
  ASSERT_TRUE(set_tuning("col_max_segments", 3).ok());
  EXPECT_EQ(column_knobs().max_segments, 3);
  EXPECT_EQ(column_knobs().min_segment_rows, ColumnKnobs{}.min_segment_rows);
  clear_tuning();
  EXPECT_EQ(column_knobs().max_segments, ColumnKnobs{}.max_segments);
}

}  // namespace
}  // namespace reducekit
