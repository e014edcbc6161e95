// nccl_tuner_test_double: a TEST DOUBLE of a cloud image's NCCL tuner plugin, built from our
// sources as libnccl-tuner-testdouble.so, so that chaining can be checked without NCCL. It is a
// real (tiny) plugin: NCCL could load it.
//
// It exports ncclTunerPlugin_v3 and ncclTunerPlugin_v5 (not v4 or v6), so a caller at v6 must
// pick v5 and a caller at v4 must pick v3. Its getCollInfo doubles every usable entry of the
// table and sets nChannels to 7, so that the order of two tuners shows in the result (doubled,
// then adjusted, differs from adjusted, then doubled). Every call is recorded; tunerDoubleLog()
// returns the record. TUNER_DOUBLE_FAIL=init or =getCollInfo makes that call return
// ncclInternalError.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "nccl_tuner/tuner_abi.h"

namespace {

namespace abi = rankmap::nccl_tuner::abi;

constexpr uint64_t kMagic = 0x5455'4e45'5244'424cull;

struct Context {
  uint64_t magic = kMagic;
  int version = 0;
};

std::mutex mu;
std::string record;

void note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu);
  record += line + "\n";
}

bool failing(const char* call) {
  const char* f = std::getenv("TUNER_DOUBLE_FAIL");
  return f != nullptr && std::strcmp(f, call) == 0;
}

abi::Result init(int version, size_t nRanks, size_t nNodes, void** context) {
  note("init v" + std::to_string(version) + " ranks=" + std::to_string(nRanks) +
       " nodes=" + std::to_string(nNodes));
  if (failing("init")) return abi::Result::kInternalError;
  *context = new Context{kMagic, version};
  return abi::Result::kSuccess;
}

abi::Result getCollInfo(void* context, abi::Func coll, size_t nBytes, float** table, int numAlgo,
                        int numProto, int* nChannels) {
  auto* c = static_cast<Context*>(context);
  note("getCollInfo v" + std::to_string(c != nullptr && c->magic == kMagic ? c->version : -1) +
       " coll=" + std::to_string(static_cast<int>(coll)) + " bytes=" + std::to_string(nBytes));
  if (failing("getCollInfo")) return abi::Result::kInternalError;
  float* t = reinterpret_cast<float*>(table);
  for (int i = 0; i < numAlgo * numProto; ++i)
    if (t[i] >= 0) t[i] *= 2;
  *nChannels = 7;
  return abi::Result::kSuccess;
}

abi::Result finalize(void* context) {
  auto* c = static_cast<Context*>(context);
  note("finalize v" + std::to_string(c != nullptr && c->magic == kMagic ? c->version : -1));
  delete c;
  return abi::Result::kSuccess;
}

abi::Result initV3(size_t nRanks, size_t nNodes, abi::Logger, void** context) {
  return init(3, nRanks, nNodes, context);
}
abi::Result getCollInfoV3(void* context, abi::Func coll, size_t nBytes, int, float** table,
                          int numAlgo, int numProto, int* nChannels) {
  return getCollInfo(context, coll, nBytes, table, numAlgo, numProto, nChannels);
}
abi::Result initV5(void** context, uint64_t, size_t nRanks, size_t nNodes, abi::Logger,
                   abi::NvlDomainInfo*, abi::TunerConstants*) {
  return init(5, nRanks, nNodes, context);
}
abi::Result getCollInfoV5(void* context, abi::Func coll, size_t nBytes, int, float** table,
                          int numAlgo, int numProto, int, int* nChannels) {
  return getCollInfo(context, coll, nBytes, table, numAlgo, numProto, nChannels);
}

}  // namespace

extern "C" {
__attribute__((visibility("default"))) extern const abi::TunerV3 ncclTunerPlugin_v3;
__attribute__((visibility("default"))) extern const abi::TunerV5 ncclTunerPlugin_v5;

// The calls so far, one per line ("init v5 ranks=8 nodes=8", "getCollInfo v5 coll=4 bytes=..",
// "finalize v5"); tunerDoubleReset() clears it.
__attribute__((visibility("default"))) const char* tunerDoubleLog() {
  static thread_local std::string copy;
  std::lock_guard<std::mutex> lock(mu);
  copy = record;
  return copy.c_str();
}
__attribute__((visibility("default"))) void tunerDoubleReset() {
  std::lock_guard<std::mutex> lock(mu);
  record.clear();
}
}

const abi::TunerV3 ncclTunerPlugin_v3 = {"testdouble", initV3, getCollInfoV3, finalize};
const abi::TunerV5 ncclTunerPlugin_v5 = {"testdouble", initV5, getCollInfoV5, finalize};
