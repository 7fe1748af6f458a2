// SPDX-License-Identifier: Apache-2.0
// The library's version: the one source CMake reads (project(VERSION)) and programs can check.
#pragma once

#define REDUCEKIT_VERSION_MAJOR 0
#define REDUCEKIT_VERSION_MINOR 1
#define REDUCEKIT_VERSION_PATCH 0
// MAJOR * 10000 + MINOR * 100 + PATCH, for #if comparisons.
#define REDUCEKIT_VERSION (REDUCEKIT_VERSION_MAJOR * 10000 + REDUCEKIT_VERSION_MINOR * 100 + REDUCEKIT_VERSION_PATCH)
