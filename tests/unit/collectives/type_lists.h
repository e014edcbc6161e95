// Every data type and every reduction operator, for tests that sweep them all.
#pragma once

#include <iterator>

#include "collectives/types.h"

namespace rankmap::coll::testing {

inline constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,  DataType::kInt32,   DataType::kUint32,
    DataType::kInt64,   DataType::kUint64, DataType::kFloat16, DataType::kBFloat16,
    DataType::kFloat32, DataType::kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kAvg};
static_assert(std::size(kAllTypes) == kNumDataTypes && std::size(kAllOps) == kNumReduceOps);

}  // namespace rankmap::coll::testing
