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
  ASSERT_TRUE(set_tuning("max_cluster", 4).is_ok());
  ASSERT_TRUE(set_tuning("ring", 0).is_ok());
  EXPECT_EQ(tuning("max_cluster"), std::optional<int64_t>(4));
  EXPECT_EQ(tuning("ring"), std::optional<int64_t>(0));
  EXPECT_FALSE(tuning("block_elems").has_value());
  ASSERT_TRUE(set_tuning("max_cluster", std::nullopt).is_ok());
  EXPECT_FALSE(tuning("max_cluster").has_value());
  EXPECT_TRUE(tuning("ring").has_value()) << "resetting one name leaves the others";
  clear_tuning();
  EXPECT_FALSE(tuning("ring").has_value());
}

TEST(Tuning, EveryStagedBandIsNamed) {
  clear_tuning();
  for (const char* band : {"staged0_", "staged1_", "staged2_", "staged3_"})
    for (const char* field : {"min_bytes", "max_bytes", "threads", "share_bytes", "ragged_only"}) {
      const std::string name = std::string(band) + field;
      ASSERT_TRUE(set_tuning(name, 1).is_ok()) << name;
      EXPECT_EQ(tuning(name.c_str()), std::optional<int64_t>(1)) << name;
    }
  EXPECT_FALSE(set_tuning("staged4_threads", 256).is_ok()) << "four bands, numbered from 0";
  clear_tuning();
}

TEST(Tuning, UnknownNamesAreRefusedByName) {
  const Status s = set_tuning("max_clusters", 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'max_clusters'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("max_cluster,"), std::string::npos) << "the message lists the names: " << s.message();
  EXPECT_FALSE(tuning("max_clusters").has_value());
}

TEST(Tuning, ReduceKnobsTakeTheOverrides) {
  clear_tuning();
  EXPECT_EQ(reduce_knobs().max_segments, ReduceKnobs{}.max_segments);
  ASSERT_TRUE(set_tuning("col_max_segments", 3).is_ok());
  EXPECT_EQ(reduce_knobs().max_segments, 3);
  EXPECT_EQ(reduce_knobs().min_segment_rows, ReduceKnobs{}.min_segment_rows);
  ASSERT_TRUE(set_tuning("row_warp_max_vectors", 2048).is_ok());
  EXPECT_EQ(reduce_knobs().row_warp_max_vectors, 2048);
  clear_tuning();
  EXPECT_EQ(reduce_knobs().row_warp_max_vectors, ReduceKnobs{}.row_warp_max_vectors);
  EXPECT_EQ(reduce_knobs().max_segments, ReduceKnobs{}.max_segments);
}

}  // namespace
}  // namespace reducekit
