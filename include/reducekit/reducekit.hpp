// SPDX-License-Identifier: Apache-2.0
// One include for users of the reducekit C++ API.
#pragma once

#include "reducekit/batch_norm.hpp"
#include "reducekit/loss.hpp"
#include "reducekit/norm.hpp"
#include "reducekit/reduce.hpp"
#include "reducekit/softmax.hpp"
#include "reducekit/status.hpp"
#include "reducekit/tensor.hpp"
#include "reducekit/version.hpp"
#include "reducekit/workspace.hpp"
