// Vocabulary of the collective engine: element types, reduction operators and collectives
// (algorithms are common/algorithm.h's, shared with the planner), with their names as they appear on command lines, in plan.json and in logs.
//
// Contract: the numeric values of DataType and ReduceOp are stable; the C API
// (collectives/include/rankmap/coll.h) mirrors them one to one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/algorithm.h"

namespace rankmap::coll {

enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
};
inline constexpr int kNumDataTypes = 10;

enum class ReduceOp : int {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  // Sum, then divided by the world size once at the end (integers: rounded toward zero).
  kAvg = 4,
};
inline constexpr int kNumReduceOps = 5;

enum class Collective : int {
  kAllreduce = 0,
  kAllgather = 1,
  kReduceScatter = 2,
  kBroadcast = 3,
  kReduce = 4,
  kBarrier = 5,
};

// Algorithms: the one vocabulary of common/algorithm.h (plan.json, RANKMAP_ALGO, the planner).
using rankmap::Algorithm;
using rankmap::algorithmName;
using rankmap::parseAlgorithm;

size_t elementSize(DataType t);
bool isFloatingPoint(DataType t);

// Names: nccl-tests style for types ("int8", "half", "bfloat16", "float", "double"; "fp16",
// "bf16", "fp32", "fp64", "float16", "float32", "float64" are accepted as aliases).
std::string_view dataTypeName(DataType t);
std::optional<DataType> parseDataType(std::string_view name);
std::string_view reduceOpName(ReduceOp op);  // "sum", "prod", "min", "max", "avg"
std::optional<ReduceOp> parseReduceOp(std::string_view name);
// "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "barrier" (the plan.json keys).
std::string_view collectiveName(Collective c);
std::optional<Collective> parseCollective(std::string_view name);

}  // namespace rankmap::coll
