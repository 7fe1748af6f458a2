// SPDX-License-Identifier: Apache-2.0
// A registered op by name ("reducekit::softmax"), for code that calls an op through the
// dispatcher (the C++ autograd, the eager entries): look it up once (a static at the call site),
// call it typed. ATen only, so the eager-entry module, which links no reducekit library, shares it.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace reducekit_torch {

template <class Signature> c10::TypedOperatorHandle<Signature> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

}  // namespace reducekit_torch
