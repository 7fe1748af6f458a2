// SPDX-License-Identifier: Apache-2.0
// Caller-owned device scratch memory for the ops that need it (reductions, split softmax rows).
// Convention (CUB's): a requirements query says how many bytes a call needs and how many of
// them, a prefix, must be zero when the call starts; every call leaves that prefix zero again,
// so a workspace zeroed once may be reused by later calls on the same stream whose prefix is as
// long (a call writes the rest from the end of its own prefix on: one with a shorter prefix
// would overwrite a longer one; `tickets` below serves calls of every size), and calls that may
// run concurrently need workspaces of their own.
#pragma once

#include <cstddef>

namespace reducekit {

struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
  // Optional: the zeroed prefix (completion tickets, arrival counters) in memory of its own, at
  // least the op's zeroed bytes, zero on entry (every call leaves it zero again). Then `data`
  // holds only the rest and needs no clearing: one zeroed buffer per stream, cleared once,
  // serves every later call on that stream with no memset per call.
  void* tickets = nullptr;
  std::size_t ticket_bytes = 0;
};

}  // namespace reducekit
