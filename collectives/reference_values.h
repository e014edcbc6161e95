// Reference values for checking collective results: an input value for every (rank, element),
// type and operator, and the reduction over ranks computed here, independently of the engine.
// `rankmap bench --check` and the engine's unit tests check every element against these.
//
// Integers take arbitrary bit patterns (sum and prod wrap; every result is exact and
// order-independent). Floating-point values are small integers (+-1 and 2 for prod) so that every
// partial sum or product is exact in the type: results are then bit-exact whatever the reduction
// order, and must equal the reference exactly.
#pragma once

#include <cstdint>

#include "collectives/types.h"

namespace rankmap::coll {

// Writes input element `index` of rank `rank` (elementSize(t) bytes) to `out`.
void referenceInput(DataType t, ReduceOp op, int rank, uint64_t index, void* out);

// Writes the reduction with `op` of element `index` over ranks 0..worldSize-1 (worldSize >= 1)
// to `out`. kAvg divides once, in the element type (fp32 for fp16 and bf16), as the engine does.
void referenceResult(DataType t, ReduceOp op, int worldSize, uint64_t index, void* out);

// Writes `value` converted to floating-point type `t` (round to nearest) to `out`; writes nothing
// for an integer type.
void storeFloatingPoint(DataType t, double value, void* out);

}  // namespace rankmap::coll
