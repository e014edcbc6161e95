#include "collectives/types.h"

#include <array>
#include <utility>

namespace rankmap::coll {
namespace {

template <typename E, size_t N>
std::optional<E> lookup(const std::array<std::pair<std::string_view, E>, N>& table,
                        std::string_view name) {
  for (const auto& [n, v] : table)
    if (n == name) return v;
  return std::nullopt;
}

template <typename E, size_t N>
std::string_view nameOf(const std::array<std::pair<std::string_view, E>, N>& table, E value) {
  for (const auto& [n, v] : table)
    if (v == value) return n;
  return "?";
}

// The first entry for a value is its canonical name; later ones are aliases.
constexpr std::array<std::pair<std::string_view, DataType>, 17> kTypeNames = {{
    {"int8", DataType::kInt8},
    {"uint8", DataType::kUint8},
    {"int32", DataType::kInt32},
    {"uint32", DataType::kUint32},
    {"int64", DataType::kInt64},
    {"uint64", DataType::kUint64},
    {"half", DataType::kFloat16},
    {"bfloat16", DataType::kBFloat16},
    {"float", DataType::kFloat32},
    {"double", DataType::kFloat64},
    {"fp16", DataType::kFloat16},
    {"float16", DataType::kFloat16},
    {"bf16", DataType::kBFloat16},
    {"fp32", DataType::kFloat32},
    {"float32", DataType::kFloat32},
    {"fp64", DataType::kFloat64},
    {"float64", DataType::kFloat64},
}};

constexpr std::array<std::pair<std::string_view, ReduceOp>, 5> kOpNames = {{
    {"sum", ReduceOp::kSum},
    {"prod", ReduceOp::kProd},
    {"min", ReduceOp::kMin},
    {"max", ReduceOp::kMax},
    {"avg", ReduceOp::kAvg},
}};

constexpr std::array<std::pair<std::string_view, Collective>, 6> kCollectiveNames = {{
    {"allreduce", Collective::kAllreduce},
    {"allgather", Collective::kAllgather},
    {"reducescatter", Collective::kReduceScatter},
    {"broadcast", Collective::kBroadcast},
    {"reduce", Collective::kReduce},
    {"barrier", Collective::kBarrier},
}};

}  // namespace

size_t elementSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

bool isFloatingPoint(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

std::string_view dataTypeName(DataType t) { return nameOf(kTypeNames, t); }
std::optional<DataType> parseDataType(std::string_view name) { return lookup(kTypeNames, name); }
std::string_view reduceOpName(ReduceOp op) { return nameOf(kOpNames, op); }
std::optional<ReduceOp> parseReduceOp(std::string_view name) { return lookup(kOpNames, name); }
std::string_view collectiveName(Collective c) { return nameOf(kCollectiveNames, c); }
std::optional<Collective> parseCollective(std::string_view name) {
  return lookup(kCollectiveNames, name);
}

}  // namespace rankmap::coll
