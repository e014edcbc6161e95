// The one link between librankmap_nccl.so (this shim) and librankmap_nccl_tuner.so (nccl_tuner/).
//
// A tuner's choices must be the same on every rank of a communicator: ranks that pick different
// algorithms or protocols for one collective hang. The shim's plan agreement (agreement.h) is
// what makes every rank hold the same plan, or all of them none. The tuner cannot run an
// agreement itself (NCCL gives its init no channel to the other ranks), so it asks the shim in
// its own process for the plan that the agreements applied, through the C function below, found
// with dlsym(RTLD_DEFAULT, kAgreedPlanSymbol): the shim is preloaded, so its exports are global.
// The answer is the plan's text, not a path, so that the tuner uses the very plan that was
// agreed on (a file rewritten in between cannot make one rank tune differently).
#pragma once

#include <cstddef>

extern "C" {
// Answers, with `text` as described:
//  1  every plan agreement for a communicator of `nranks` ranks in this process applied one
//     plan; `text` gets its plan.json text;
//  0  the shim holds a plan but no agreement of that size ran (its unique id carried none: a
//     communicator the plan is not about, or one made before the shim saw it); `text`: the reason;
//  2  the shim holds no plan (off, RANKMAP_PLAN not set, or unusable); `text`: the reason;
//  3  an agreement of that size ended in identity order; `text`: the reason;
// -1  bad arguments.
// At most `capacity` bytes are written (no terminating NUL); `*length` gets the full length, so a
// caller whose buffer was too small calls again with a larger one. Never throws.
typedef int (*RankmapNcclAgreedPlanFn)(int nranks, char* text, size_t capacity, size_t* length);
}

namespace rankmap::shim_nccl {

inline constexpr char kAgreedPlanSymbol[] = "rankmap_nccl_agreed_plan";

enum class AgreedPlanStatus : int {
  kApplied = 1,
  kNoAgreement = 0,
  kNoPlan = 2,
  kIdentity = 3,
  kBadArguments = -1,
};

}  // namespace rankmap::shim_nccl
